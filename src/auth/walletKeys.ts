import type { KeyPrincipal, Ledger } from "../ledger/ledger.ts";
import type { Sql } from "../store/db.ts";

/** The label of a wallet's own key, as GET /v1/auth/keys and /v1/usage show it. */
export const WALLET_KEY_LABEL = "wallet (keyless x402 and SIWx calls)";

/**
 * The key_hash a wallet's own key is stored under: not a SHA-256 hex (64 hex digits) like every API key's, so no
 * Bearer key ever resolves to it (ApiKeyAuth hashes what it is given and looks the hash up).
 */
export const walletKeyHash = (wallet: string) => `wallet:${wallet}`;

/**
 * The wallet's own key: what a call without an API key (paid on its 402 with x402, or signed in with SIWx) is held and
 * charged under, so that it goes through the same ledger as a key call (one reserve, one settle, the same outbox,
 * `admin audit`) and shows in the wallet's usage as one more key. It has no plaintext and no budget; it is made on
 * first use like any key (Postgres, then Redis) and revoking it (DELETE /v1/auth/keys/{id}) stops the wallet's keyless
 * calls from spending its balance (a 401, nothing charged).
 */
export class WalletKeys {
  private readonly cache = new Map<string, KeyPrincipal>();

  constructor(
    private readonly sql: Sql,
    private readonly ledger: Ledger,
  ) {}

  async principal(wallet: string): Promise<KeyPrincipal> {
    const hit = this.cache.get(wallet);
    if (hit) return hit;
    const hash = walletKeyHash(wallet);
    let p = await this.ledger.apiKeys.lookup(hash);
    if (!p) {
      await this.sql`
        INSERT INTO api_keys (wallet, key_hash, label) VALUES (${wallet}, ${hash}, ${WALLET_KEY_LABEL})
        ON CONFLICT (key_hash) DO NOTHING`;
      const [row] = await this.sql<{ id: number; revoked: boolean }[]>`
        SELECT id, revoked_at IS NOT NULL AS revoked FROM api_keys WHERE key_hash = ${hash}`;
      p = this.ledger.principal(Number(row!.id), wallet);
      // A revoke recorded in Postgres wins (restore never turns a revoked key active).
      await this.ledger.apiKeys.restore(p, hash, { revoked: row!.revoked, budget: null });
    }
    if (this.cache.size >= 100_000) this.cache.clear();
    this.cache.set(wallet, p);
    return p;
  }
}
