import type { Leases } from "../../billing/leases.ts";
import { type ApiKeyAuth, generateApiKey, hashApiKey } from "../../auth/apiKeys.ts";
import { ApiError } from "../../errors.ts";
import type { Ledger } from "../../ledger/ledger.ts";
import type { Credits } from "../../store/credits.ts";
import type { Sql } from "../../store/db.ts";

/** SHA-256 hex of a redeem code (normalised: trimmed, lower-case): the only form it is stored in. */
export function hashRedeemCode(code: string): string {
  return new Bun.CryptoHasher("sha256").update(code.trim().toLowerCase()).digest("hex");
}

export interface CreateKeyInput {
  label?: string;
  budget_usdc?: number;
  /** Catalog ids or "<provider>/*" the key may call (checked by the route against the catalog). */
  models?: string[];
  requests_per_minute?: number;
  ref_code?: string;
  redeem_code?: string;
}

interface KeyRow {
  id: number;
  label: string;
  created_at: Date;
  revoked_at: Date | null;
}

interface ListedKeyRow extends KeyRow {
  models: string | null;
  requests_per_minute: number | null;
}

/**
 * API key life cycle. Postgres is written first (the record), then Redis (the state reserve-batch checks), so a
 * crash in between leaves a key that the auth path repairs, or a revoke that a retried DELETE completes.
 */
export class KeyService {
  constructor(
    private readonly sql: Sql,
    private readonly ledger: Ledger,
    private readonly credits: Credits,
    /** Told of each new key, so its hash is never answered from the unknown-key cache. */
    private readonly auth?: Pick<ApiKeyAuth, "created">,
    /** Told of each revoke, so this process's lease on the key admits nothing more at once (others' within a second). */
    private readonly leases?: Pick<Leases, "revoked">,
    /** Active keys a wallet may have (MAX_KEYS_PER_WALLET). */
    private readonly maxKeys = 100,
  ) {}

  /**
   * Creates a key. A `redeem_code` is spent (once, across all wallets), its credit recorded and the key
   * inserted by one SQL statement; a `ref_code` attributes the wallet to its referrer, if this is the wallet's
   * first key, in the statement that inserts the key. So an unknown or spent code is 400 with nothing written.
   * (Single statements, not transactions: embedded PGlite serves every pooled connection from one session.)
   * Redis (key state, then the credit) follows. At most one of the codes: the route refuses both before the sign-in.
   */
  async create(wallet: string, input: CreateKeyInput) {
    // Counted before the insert (by the wallet index): concurrent creations, each with its own signed message, may
    // pass the bound by the few that race; a wallet cannot grow its rows without bound.
    const [active] = await this.sql<{ n: number }[]>`
      SELECT COUNT(*)::int AS n FROM api_keys WHERE wallet = ${wallet} AND revoked_at IS NULL`;
    if (active!.n >= this.maxKeys)
      throw new ApiError({
        code: "KEY_LIMIT_REACHED",
        message: `This wallet has ${active!.n} active API keys, the most it may have (${this.maxKeys}); revoke one (DELETE /v1/auth/keys/{key_id}) to create another`,
      });
    const key = generateApiKey();
    const hash = hashApiKey(key);
    const label = input.label ?? "";
    const budget = input.budget_usdc ?? null;
    // Fixed for the key's life, so they travel with its cached mapping (ledger/apiKeyState.ts).
    const limits = { models: input.models ? [...new Set(input.models)] : null, rpm: input.requests_per_minute ?? null };
    const models = limits.models ? JSON.stringify(limits.models) : null;
    const rpm = limits.rpm;
    let row: KeyRow | undefined;
    let redeemed: { id: number; eventId: string; wallet: string; amountUsdc: number } | undefined;
    if (input.redeem_code !== undefined) {
      const codeHash = hashRedeemCode(input.redeem_code);
      const eventId = `redeem:${codeHash}`;
      const [r] = await this.sql<(KeyRow & { credit_id: number; amount_usdc: number })[]>`
        WITH code AS (
          UPDATE redeem_codes SET redeemed_by = ${wallet}, redeemed_at = now()
          WHERE code_hash = ${codeHash} AND redeemed_at IS NULL RETURNING amount_usdc
        ), credit AS (
          INSERT INTO credits (event_id, wallet, kind, amount_usdc, reason)
          SELECT ${eventId}, ${wallet}, 'redeem', amount_usdc, 'redeem code' FROM code RETURNING id, amount_usdc
        ), k AS (
          INSERT INTO api_keys (wallet, key_hash, label, budget_usdc, models, requests_per_minute)
          SELECT ${wallet}, ${hash}, ${label}, ${budget}, ${models}, ${rpm} FROM code RETURNING id, label, created_at, revoked_at
        )
        SELECT k.id, k.label, k.created_at, k.revoked_at, credit.id AS credit_id, credit.amount_usdc FROM k, credit`;
      if (!r) throw new ApiError({ code: "VALIDATION_ERROR", message: "Unknown or already used redeem_code" });
      row = r;
      redeemed = { id: r.credit_id, eventId, wallet, amountUsdc: r.amount_usdc };
    } else if (input.ref_code !== undefined) {
      const code = input.ref_code.trim().toLowerCase();
      [row] = await this.sql<KeyRow[]>`
        WITH ref AS (
          SELECT code, owner FROM ref_codes WHERE code = ${code} AND owner <> ${wallet}
        ), first_key AS (
          SELECT NOT EXISTS (SELECT 1 FROM api_keys WHERE wallet = ${wallet}) AS yes
        ), attributed AS (
          INSERT INTO referrals (wallet, ref_code, referrer)
          SELECT ${wallet}, ref.code, ref.owner FROM ref, first_key WHERE first_key.yes
          ON CONFLICT (wallet) DO NOTHING
        )
        INSERT INTO api_keys (wallet, key_hash, label, budget_usdc, models, requests_per_minute)
        SELECT ${wallet}, ${hash}, ${label}, ${budget}, ${models}, ${rpm} FROM ref RETURNING id, label, created_at, revoked_at`;
      if (!row) {
        const [known] = await this.sql`SELECT 1 FROM ref_codes WHERE code = ${code}`;
        throw new ApiError({ code: "VALIDATION_ERROR", message: known ? "A wallet cannot refer itself" : "Unknown ref_code" });
      }
    } else {
      [row] = await this.sql<KeyRow[]>`
        INSERT INTO api_keys (wallet, key_hash, label, budget_usdc, models, requests_per_minute)
        VALUES (${wallet}, ${hash}, ${label}, ${budget}, ${models}, ${rpm})
        RETURNING id, label, created_at, revoked_at`;
    }
    const created = row!;
    this.auth?.created(hash);
    await this.ledger.apiKeys.put(this.ledger.principal(created.id, wallet, limits), hash, { revoked: false, budget });
    const out: { id: number; key: string; label: string; created_at: string; redeemed_credit_usdc?: number } = {
      id: created.id,
      key,
      label: created.label,
      created_at: created.created_at.toISOString(),
    };
    if (redeemed) {
      // Recorded in Postgres already; if this Redis write fails the reconciler applies it (applied_at is NULL).
      await this.credits.applyRecorded(redeemed);
      out.redeemed_credit_usdc = redeemed.amountUsdc;
    }
    return out;
  }

  async list(wallet: string) {
    const rows = await this.sql<ListedKeyRow[]>`
      SELECT id, label, created_at, revoked_at, models, requests_per_minute FROM api_keys WHERE wallet = ${wallet} ORDER BY id`;
    return rows.map((r) => ({
      id: r.id,
      label: r.label,
      created_at: r.created_at.toISOString(),
      revoked_at: r.revoked_at?.toISOString() ?? null,
      models: r.models === null ? null : (JSON.parse(r.models) as string[]),
      requests_per_minute: r.requests_per_minute,
    }));
  }

  /** Revokes a key of this wallet; revoking a revoked key again succeeds (and re-asserts Redis). 404 otherwise. */
  async revoke(wallet: string, keyId: number): Promise<void> {
    const [row] = await this.sql<{ id: number }[]>`
      UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now())
      WHERE id = ${keyId} AND wallet = ${wallet} RETURNING id`;
    if (!row) throw new ApiError({ code: "NOT_FOUND", message: "No such API key for this wallet" });
    this.leases?.revoked(keyId);
    await this.ledger.apiKeys.revoke(this.ledger.principal(keyId, wallet));
  }
}
