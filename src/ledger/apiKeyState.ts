import type { ChainableCommander, Redis } from "ioredis";
import type { KeyPrincipal } from "./ledger.ts";
import type { RedisNames } from "./names.ts";

/** An API key's mutable state, as Postgres records it. */
export interface KeyState {
  revoked: boolean;
  budget: number | null;
}

/** The field/value pairs of a key's state, as reserve-7.lua reads them (revoked "1"/"0"; budget "" for none). */
export function keyStateFields(s: KeyState): { revoked: string; budget: string } {
  return { revoked: s.revoked ? "1" : "0", budget: s.budget === null ? "" : String(s.budget) };
}

// Redis reads and writes a few thousand revocations per pipeline comfortably.
const BATCH = 1000;

/**
 * The API keys' side of Redis, the one place that writes and reads it: a key's hash → "keyId|wallet" mapping
 * (immutable) and its state hash (revoked, budget; the counters beside them are the Lua scripts'). Postgres is
 * the record; these are written after it and restored from it.
 */
export class ApiKeyState {
  constructor(
    private readonly redis: Redis,
    private readonly names: RedisNames,
    private readonly principal: (keyId: number, wallet: string) => KeyPrincipal,
  ) {}

  /** The key of a SHA-256 hash, as Redis maps it; null when Redis does not know the hash. */
  async lookup(hash: string): Promise<KeyPrincipal | null> {
    const mapped = await this.redis.get(this.names.keyHash(hash));
    if (!mapped) return null;
    const bar = mapped.indexOf("|");
    return this.principal(Number(mapped.slice(0, bar)), mapped.slice(bar + 1));
  }

  /** Writes a key just created in Postgres: its state, then its hash mapping, in one MULTI. */
  async put(p: KeyPrincipal, hash: string, state: KeyState): Promise<void> {
    await this.redis.multi().hset(p.apiKeyName, keyStateFields(state)).set(this.names.keyHash(hash), mapping(p)).exec();
  }

  /**
   * Restores a key Postgres has and Redis lost (a crash between the two writes, or Redis lost its data). A revoke
   * recorded in Postgres always wins; an active key only fills a missing field.
   */
  async restore(p: KeyPrincipal, hash: string, state: KeyState): Promise<void> {
    const f = keyStateFields(state);
    await this.redis
      .multi()
      [state.revoked ? "hset" : "hsetnx"](p.apiKeyName, "revoked", f.revoked)
      .hsetnx(p.apiKeyName, "budget", f.budget)
      .set(this.names.keyHash(hash), mapping(p))
      .exec();
  }

  /** Revokes a key: reserve-7 refuses it from its very next request. */
  async revoke(p: KeyPrincipal): Promise<void> {
    await this.redis.hset(p.apiKeyName, "revoked", "1");
  }

  /** Whether the key is active now (the non-chat endpoints; chat checks inside reserve-7). */
  async isActive(p: KeyPrincipal): Promise<boolean> {
    return (await this.redis.hget(p.apiKeyName, "revoked")) === "0";
  }

  /** Of these keys (all revoked in Postgres), revokes again each one Redis lost; returns the indices it revoked. */
  async restoreRevocations(revoked: KeyPrincipal[]): Promise<number[]> {
    const lost: number[] = [];
    for (let start = 0; start < revoked.length; start += BATCH) {
      const p = this.redis.pipeline();
      for (const k of revoked.slice(start, start + BATCH)) p.hget(k.apiKeyName, "revoked");
      const replies = (await p.exec()) ?? [];
      replies.forEach(([err, v], i) => {
        if (err) throw err;
        if (v !== "1") lost.push(start + i);
      });
    }
    if (lost.length === 0) return lost;
    const p = this.redis.pipeline();
    for (const i of lost) p.hset(revoked[i]!.apiKeyName, "revoked", "1");
    await p.exec();
    return lost;
  }

  /** Queues a rebuilt key on a rebuild's pipeline: its whole hash (state and counters) and its hash mapping. */
  queueRebuilt(pipeline: ChainableCommander, p: KeyPrincipal, hash: string, state: KeyState, counters: Record<string, number>): void {
    pipeline.hset(p.apiKeyName, { ...keyStateFields(state), ...counters });
    pipeline.set(this.names.keyHash(hash), mapping(p));
  }
}

/** The value of a key's hash mapping. */
function mapping(p: KeyPrincipal): string {
  return `${p.keyId}|${p.wallet}`;
}
