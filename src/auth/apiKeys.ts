import type { Redis } from "ioredis";
import { ApiError } from "../errors.ts";
import type { KeyPrincipal, Ledger } from "../ledger/ledger.ts";
import type { Sql } from "../store/db.ts";
import { writeKeyState } from "../store/rebuild.ts";

const KEY_FORMAT = /^sk-[0-9a-f]{64}$/;
const CACHE_LIMIT = 100_000;

/** A new plaintext key: `sk-` + 32 random bytes as hex. Only its SHA-256 is ever stored. */
export function generateApiKey(): string {
  return "sk-" + Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("hex");
}

/** SHA-256 hex of a plaintext key: the only form the key is stored and looked up in. */
export function hashApiKey(key: string): string {
  return new Bun.CryptoHasher("sha256").update(key).digest("hex");
}

/**
 * Resolves `Authorization: Bearer sk-…` to its key id and wallet. The hash → (id, wallet) mapping never changes,
 * so it is cached in process with no invalidation; whether the key is revoked is checked in Redis by reserve-7
 * (chat) or `assertActive` (other endpoints), so a revoke bites on the very next request.
 */
export class ApiKeyAuth {
  private readonly cache = new Map<string, KeyPrincipal>();

  constructor(
    private readonly redis: Redis,
    private readonly sql: Sql,
    private readonly ledger: Ledger,
  ) {}

  /** Parses the header and resolves the key; 401 for anything missing, malformed or unknown. */
  async fromHeader(header: string | null): Promise<KeyPrincipal> {
    // The auth scheme is case-insensitive (RFC 9110); clients send "Bearer" and sometimes "bearer".
    if (!header || header.length < 7 || header.slice(0, 7).toLowerCase() !== "bearer ") throw new ApiError("UNAUTHORIZED");
    return this.resolve(header.slice(7).trim());
  }

  async resolve(key: string): Promise<KeyPrincipal> {
    if (!KEY_FORMAT.test(key)) throw new ApiError("UNAUTHORIZED");
    const hash = hashApiKey(key);
    const hit = this.cache.get(hash);
    if (hit) return hit;
    const mapped = await this.redis.get(this.ledger.keys.keyHash(hash));
    let principal: KeyPrincipal;
    if (mapped) {
      const bar = mapped.indexOf("|");
      principal = this.ledger.principal(Number(mapped.slice(0, bar)), mapped.slice(bar + 1));
    } else {
      principal = await this.repairFromDatabase(hash);
    }
    if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
    this.cache.set(hash, principal);
    return principal;
  }

  /** 401 unless the key is active now (the non-chat endpoints; chat checks inside reserve-7). */
  async assertActive(p: KeyPrincipal): Promise<void> {
    if ((await this.redis.hget(p.apiKeyKey, "revoked")) !== "0") throw new ApiError("UNAUTHORIZED");
  }

  // A key created in Postgres whose Redis write was lost (crash in between): restore the Redis side.
  private async repairFromDatabase(hash: string): Promise<KeyPrincipal> {
    const [row] = await this.sql<{ id: number; wallet: string; budget_usdc: number | null; revoked: boolean }[]>`
      SELECT id, wallet, budget_usdc, revoked_at IS NOT NULL AS revoked FROM api_keys WHERE key_hash = ${hash}`;
    if (!row) throw new ApiError("UNAUTHORIZED");
    const p = this.ledger.principal(row.id, row.wallet);
    const state = writeKeyState(row.revoked, row.budget_usdc);
    await this.redis
      .multi()
      // A revoke recorded in Postgres always wins; an active key only fills a missing field.
      [row.revoked ? "hset" : "hsetnx"](p.apiKeyKey, "revoked", state.revoked!)
      .hsetnx(p.apiKeyKey, "budget", state.budget!)
      .set(this.ledger.keys.keyHash(hash), `${row.id}|${row.wallet}`)
      .exec();
    return p;
  }
}
