/**
 * The ledger's reads that run no script (a wallet's balance, API keys' counters and budget left, Redis's clock), apart
 * from ledger.ts's script calls: plain commands on the scripts' connection, each sent after its shard's queued
 * settles so it sees what answers already given charged.
 */
import type { KeyRouter } from "../redis/router.ts";
import type { KeyPrincipal, RedisNames } from "./names.ts";

/** Reads of the ledger's Redis state; `flush` sends a shard's queued reserves and settles first (batcher.ts). */
export class LedgerReads {
  constructor(
    private readonly client: KeyRouter,
    private readonly names: RedisNames,
    private readonly flush: (shard: string) => void,
  ) {}

  /** Balance and locked credit of a wallet; an unknown wallet has both 0. */
  async balance(wallet: string): Promise<{ balance: number; locked: number }> {
    const shard = this.names.shardOf(wallet);
    const key = this.names.wallet(shard, wallet);
    // Settles queued behind answers already given go first, so a read after an answer sees its charge.
    this.flush(shard);
    const [b, l] = (await this.client.send("HMGET", [key, "balance", "locked"], key)) as (string | null)[];
    return { balance: Number(b ?? 0), locked: Number(l ?? 0) };
  }

  /**
   * Counter fields of API keys (missing ones are 0). Read on the connection the settles go through, after the
   * shard's queued settles, so a usage report asked for after an answer already counts that answer's settle.
   */
  async keyCounters(keys: KeyPrincipal[], fields: readonly string[]): Promise<number[][]> {
    for (const k of keys) this.flush(k.shard);
    const replies = await Promise.all(
      keys.map((k) => this.client.send("HMGET", [k.apiKeyName, ...fields], k.apiKeyName) as Promise<(string | null)[]>),
    );
    return replies.map((r) => r.map((x) => Number(x ?? 0)));
  }

  /**
   * What a key's own budget has left (budget − spent − locked), or null for a key without a budget: a paid call
   * looks before it pays, since paying cannot lift a key's budget. Advisory: the reserve decides.
   */
  async keyBudgetLeft(key: KeyPrincipal): Promise<number | null> {
    this.flush(key.shard);
    const name = key.apiKeyName;
    const [budget, spent, locked] = (await this.client.send("HMGET", [name, "budget", "spent", "locked"], name)) as (string | null)[];
    if (budget === null || budget === "") return null;
    return Number(budget) - Number(spent ?? 0) - Number(locked ?? 0);
  }

  /**
   * Redis's clock in ms, of the node holding `shard`: hold expiries (reserve-batch, the sweeper, extendHold) all use
   * it, never a gateway's.
   */
  async redisNowMs(shard: string): Promise<number> {
    const [sec, usec] = (await this.client.send("TIME", [], this.names.holds(shard))) as [string, string];
    return Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
  }
}
