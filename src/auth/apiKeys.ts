import { ApiError } from "../errors.ts";
import { limitsOfRow } from "../ledger/apiKeyState.ts";
import type { KeyPrincipal, Ledger } from "../ledger/ledger.ts";
import type { Sql } from "../store/db.ts";

const KEY_FORMAT = /^sk-[0-9a-f]{64}$/;
const CACHE_LIMIT = 100_000;
// Unknown keys: a hash that neither Redis nor Postgres knew answers 401 from memory for MISS_TTL_MS, without a
// Postgres query. Redis is asked before this cache and key creation writes Redis before it answers, so a key created
// in any process is found there; the short TTL bounds the one case left (Redis lost that write), and creation in
// this process also clears the hash (`created`).
const MISS_TTL_MS = 5_000;
const MISS_LIMIT = 10_000;
// Postgres lookups of keys Redis does not know go out at most this often, each for every hash waiting meanwhile
// (up to LOOKUP_BATCH): a flood of distinct unknown keys costs at most ~10 queries a second, whatever its size.
const LOOKUP_INTERVAL_MS = 100;
const LOOKUP_BATCH = 1_000;

interface KeyRow {
  id: number;
  wallet: string;
  budget_usdc: number | null;
  revoked: boolean;
  key_hash: string;
  models: string | null;
  requests_per_minute: number | null;
}

/** A new plaintext key: `sk-` + 32 random bytes as hex. Only its SHA-256 is ever stored. */
export function generateApiKey(): string {
  return "sk-" + Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("hex");
}

/** SHA-256 hex of a plaintext key: the only form the key is stored and looked up in. */
export function hashApiKey(key: string): string {
  return new Bun.CryptoHasher("sha256").update(key).digest("hex");
}

/**
 * Resolves `Authorization: Bearer sk-…` to its key id and wallet. The hash → (id, wallet, the key's limits)
 * mapping never changes, so it is cached in process with no invalidation; whether the key is revoked is checked in Redis by reserve-batch
 * (chat) or `assertActive` (other endpoints), so a revoke bites on the very next request.
 */
export class ApiKeyAuth {
  private readonly cache = new Map<string, KeyPrincipal>();
  /** The same principals by the plaintext key, for the requests after the first (no hash per request). */
  private readonly byKey = new Map<string, KeyPrincipal>();
  /** Hashes known to be unknown, with when that stops being trusted (insertion order = oldest first). */
  private readonly misses = new Map<string, number>();
  /** Hashes waiting for the next Postgres lookup, with their waiters. */
  private waiting = new Map<string, { resolve(row: KeyRow | undefined): void; reject(e: unknown): void }[]>();
  private lookups: Promise<void> | null = null;
  private lastLookupAt = 0;

  constructor(
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
    // A key seen before is found without hashing it again (the SHA-256 was a share of every request's CPU, issue
    // 31). The map holds keys this process was sent and resolved, as its requests do while they run; whether a key
    // is revoked is never read from it (see the class comment), so a revoke bites on the next request as before.
    const known = this.byKey.get(key);
    if (known) return known;
    if (!KEY_FORMAT.test(key)) throw new ApiError("UNAUTHORIZED");
    const hash = hashApiKey(key);
    const hit = this.cache.get(hash);
    if (hit) return this.remember(key, hit);
    let principal = await this.ledger.apiKeys.lookup(hash);
    if (!principal) {
      const missUntil = this.misses.get(hash);
      if (missUntil !== undefined && missUntil > Date.now()) throw new ApiError("UNAUTHORIZED");
      principal = await this.repairFromDatabase(hash);
    }
    if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
    this.cache.set(hash, principal);
    return this.remember(key, principal);
  }

  private remember(key: string, p: KeyPrincipal): KeyPrincipal {
    if (this.byKey.size >= CACHE_LIMIT) this.byKey.clear();
    this.byKey.set(key, p);
    return p;
  }

  /** A key was just created in this process: never answer it from the miss cache. */
  created(hash: string): void {
    this.misses.delete(hash);
  }

  /** 401 unless the key is active now (the non-chat endpoints; chat checks inside reserve-batch). */
  async assertActive(p: KeyPrincipal): Promise<void> {
    if (!(await this.ledger.apiKeys.isActive(p))) throw new ApiError("UNAUTHORIZED");
  }

  /**
   * 401 unless the key is active now, its Redis state restored from Postgres first if Redis lost it: a paid call asks
   * this before any money moves (its reserve, where a revoke is otherwise found, comes after the payment).
   */
  async assertUsable(p: KeyPrincipal): Promise<void> {
    if (await this.ledger.apiKeys.isActive(p)) return;
    if (!(await this.restoreLostState(p))) throw new ApiError("UNAUTHORIZED");
  }

  /**
   * The reserve refused `p` as unknown: if Redis has no state for it at all (a replica promoted before the key's
   * write reached it, or a Redis that lost its data) while Postgres has the key, the state is restored and the
   * caller may reserve again. False when the refusal stands (a revoked key, or one Postgres does not have).
   */
  async restoreLostState(p: KeyPrincipal): Promise<boolean> {
    if (await this.ledger.apiKeys.hasState(p)) return false;
    const [row] = await this.sql<{ budget_usdc: number | null; revoked: boolean }[]>`
      SELECT budget_usdc, revoked_at IS NOT NULL AS revoked FROM api_keys WHERE id = ${p.keyId} AND wallet = ${p.wallet}`;
    if (!row) return false;
    await this.ledger.apiKeys.restoreState(p, { revoked: row.revoked, budget: row.budget_usdc });
    return !row.revoked;
  }

  // A key created in Postgres whose Redis write was lost (crash in between): restore the Redis side.
  private async repairFromDatabase(hash: string): Promise<KeyPrincipal> {
    const row = await this.lookup(hash);
    if (!row) {
      this.misses.delete(hash);
      if (this.misses.size >= MISS_LIMIT) this.misses.delete(this.misses.keys().next().value!);
      this.misses.set(hash, Date.now() + MISS_TTL_MS);
      throw new ApiError("UNAUTHORIZED");
    }
    const p = this.ledger.principal(row.id, row.wallet, limitsOfRow(row));
    await this.ledger.apiKeys.restore(p, hash, { revoked: row.revoked, budget: row.budget_usdc });
    return p;
  }

  /** The api_keys row of a hash, looked up together with every other hash waiting (see LOOKUP_INTERVAL_MS). */
  private lookup(hash: string): Promise<KeyRow | undefined> {
    return new Promise((resolve, reject) => {
      const waiters = this.waiting.get(hash);
      if (waiters) waiters.push({ resolve, reject });
      else this.waiting.set(hash, [{ resolve, reject }]);
      this.lookups ??= this.runLookups().finally(() => (this.lookups = null));
    });
  }

  private async runLookups(): Promise<void> {
    while (this.waiting.size > 0) {
      const wait = this.lastLookupAt + LOOKUP_INTERVAL_MS - Date.now();
      if (wait > 0) await Bun.sleep(wait);
      const batch = new Map<string, { resolve(row: KeyRow | undefined): void; reject(e: unknown): void }[]>();
      for (const [h, w] of this.waiting) {
        if (batch.size >= LOOKUP_BATCH) break;
        batch.set(h, w);
      }
      for (const h of batch.keys()) this.waiting.delete(h);
      this.lastLookupAt = Date.now();
      try {
        const rows = await this.sql<KeyRow[]>`
          SELECT id, wallet, budget_usdc, revoked_at IS NOT NULL AS revoked, key_hash, models, requests_per_minute FROM api_keys
          WHERE key_hash IN ${this.sql([...batch.keys()])}`;
        const byHash = new Map(rows.map((r) => [r.key_hash, r]));
        for (const [h, waiters] of batch) for (const w of waiters) w.resolve(byHash.get(h));
      } catch (e) {
        for (const waiters of batch.values()) for (const w of waiters) w.reject(e);
      }
    }
  }
}
