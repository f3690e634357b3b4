import { inChunks, type RedisCommands } from "../redis/connect.ts";
import type { KeyLimits, KeyPrincipal, RedisNames } from "./names.ts";

/** An API key's mutable state, as Postgres records it. */
export interface KeyState {
  revoked: boolean;
  budget: number | null;
}

/** The field/value pairs of a key's state, as reserve-batch.lua reads them (revoked "1"/"0"; budget "" for none). */
export function keyStateFields(s: KeyState): { revoked: string; budget: string } {
  return { revoked: s.revoked ? "1" : "0", budget: s.budget === null ? "" : String(s.budget) };
}

/**
 * The API keys' side of Redis, the one place that writes and reads it: a key's hash → "keyId|wallet" mapping
 * (immutable) and its state hash (revoked, budget; the counters beside them are the Lua scripts'). Postgres is
 * the record; these are written after it and restored from it.
 */
export class ApiKeyState {
  constructor(
    private readonly redis: RedisCommands,
    private readonly names: RedisNames,
    private readonly principal: (keyId: number, wallet: string, limits?: KeyLimits) => KeyPrincipal,
  ) {}

  /** The key of a SHA-256 hash, as Redis maps it (with the key's limits); null when Redis does not know the hash. */
  async lookup(hash: string): Promise<KeyPrincipal | null> {
    const mapped = await this.redis.get(this.names.keyHash(hash));
    if (!mapped) return null;
    const [keyId, wallet, limits] = parseMapping(mapped);
    return this.principal(keyId, wallet, limits);
  }

  /**
   * Writes a key just created in Postgres: its state, then its hash mapping. Two slots (the state carries its
   * wallet's shard tag, the mapping is found by hash alone), so two writes, state first: a mapping always finds its
   * state, and a crash in between leaves the mapping to ApiKeyAuth's repair from Postgres.
   */
  async put(p: KeyPrincipal, hash: string, state: KeyState): Promise<void> {
    await this.redis.hset(p.apiKeyName, keyStateFields(state));
    await this.redis.set(this.names.keyHash(hash), mapping(p));
  }

  /**
   * Restores a key Postgres has and Redis lost (a crash between the two writes, or Redis lost its data). A revoke
   * recorded in Postgres always wins; an active key only fills a missing field.
   */
  async restore(p: KeyPrincipal, hash: string, state: KeyState): Promise<void> {
    // The state's slot and the mapping's differ: state first, like `put`.
    await this.restoreState(p, state);
    await this.redis.set(this.names.keyHash(hash), mapping(p));
  }

  /** Restores a key's state hash alone (one MULTI on one key): a revoke recorded in Postgres wins, else fills gaps. */
  async restoreState(p: KeyPrincipal, state: KeyState): Promise<void> {
    const f = keyStateFields(state);
    await this.redis
      .multi()
      [state.revoked ? "hset" : "hsetnx"](p.apiKeyName, "revoked", f.revoked)
      .hsetnx(p.apiKeyName, "budget", f.budget)
      .exec();
  }

  /** Whether Redis holds the key's state at all (a promoted replica may lack a key created just before). */
  async hasState(p: KeyPrincipal): Promise<boolean> {
    return (await this.redis.hget(p.apiKeyName, "revoked")) !== null;
  }

  /** Revokes a key: reserve-batch refuses it from its very next request. */
  async revoke(p: KeyPrincipal): Promise<void> {
    await this.redis.hset(p.apiKeyName, "revoked", "1");
  }

  /** Whether the key is active now (the non-chat endpoints; chat checks inside reserve-batch). */
  async isActive(p: KeyPrincipal): Promise<boolean> {
    return (await this.redis.hget(p.apiKeyName, "revoked")) === "0";
  }

  /** Of these keys (all revoked in Postgres), revokes again each one Redis lost; returns the indices it revoked. */
  async restoreRevocations(revoked: KeyPrincipal[]): Promise<number[]> {
    // A thousand at a time, each command on its key's node (a cluster refuses a pipeline across nodes).
    const states = await inChunks(revoked, (k) => this.redis.hget(k.apiKeyName, "revoked"));
    const lost = states.flatMap((v, i) => (v !== "1" ? [i] : []));
    await inChunks(lost, (i) => this.redis.hset(revoked[i]!.apiKeyName, "revoked", "1"));
    return lost;
  }

  /** Writes a rebuilt key's hash mapping (immutable, so a stale rebuild rewrites it harmlessly; its hash is fenced). */
  writeMapping(p: KeyPrincipal, hash: string): Promise<unknown> {
    return this.redis.set(this.names.keyHash(hash), mapping(p));
  }
}

/** A rebuilt key's whole hash, state and counters: the rebuild writes it through its fenced batches (rebuild/batch.ts). */
export function rebuiltKeyFields(state: KeyState, counters: Record<string, number>): Record<string, string | number> {
  return { ...keyStateFields(state), ...counters };
}

/**
 * The value of a key's hash mapping: "keyId|wallet", then "|rpm|models" for a key created with limits (immutable
 * like the rest, so they are cached with it): rpm empty for none, models a JSON list or empty for any.
 */
function mapping(p: KeyPrincipal): string {
  const l = p.limits;
  if (!l) return `${p.keyId}|${p.wallet}`;
  return `${p.keyId}|${p.wallet}|${l.rpm ?? ""}|${l.models ? JSON.stringify(l.models) : ""}`;
}

/** A mapping's key id, wallet and limits (a mapping written before keys had limits has none). */
export function parseMapping(mapped: string): [keyId: number, wallet: string, limits: KeyLimits | undefined] {
  const bar = mapped.indexOf("|");
  const keyId = Number(mapped.slice(0, bar));
  const bar2 = mapped.indexOf("|", bar + 1);
  if (bar2 < 0) return [keyId, mapped.slice(bar + 1), undefined];
  const wallet = mapped.slice(bar + 1, bar2);
  const bar3 = mapped.indexOf("|", bar2 + 1);
  const rpm = mapped.slice(bar2 + 1, bar3);
  const models = mapped.slice(bar3 + 1);
  return [keyId, wallet, { rpm: rpm === "" ? null : Number(rpm), models: models === "" ? null : (JSON.parse(models) as string[]) }];
}

/** A key's limits from its api_keys columns (models: a JSON list, or NULL). */
export function limitsOfRow(row: { models: string | null; requests_per_minute: number | null }): KeyLimits {
  return { models: row.models === null ? null : (JSON.parse(row.models) as string[]), rpm: row.requests_per_minute };
}
