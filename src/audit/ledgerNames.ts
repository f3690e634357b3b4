/**
 * The audit's first step (audit.ts): every wallet and key there is to compare, per shard, and the Redis records
 * found in a shard their owner does not map to.
 */
import type { RedisNames } from "../ledger/names.ts";
import { type RedisCommands, scanKeys } from "../redis/connect.ts";
import type { Sql } from "../store/db.ts";

/** Which wallets and keys to read, per shard; and Redis records that sit in a shard their owner does not map to. */
export interface LedgerNames {
  byShard: Map<string, { wallets: Set<string>; keyIds: Set<number> }>;
  misplaced: { redisKey: string; belongsIn: string }[];
}

/**
 * Every wallet and key the audit compares: what Redis has (SCAN) and what Postgres knows, read in that order.
 * Money reaches Postgres before Redis (credits, keys), so a wallet or key that Redis gains during the SCAN is
 * already in the Postgres list. One created after both is left to the next audit.
 */
export async function listLedgerNames(redis: RedisCommands, sql: Sql, redisNames: RedisNames): Promise<LedgerNames> {
  const found: { shard: string; kind: string; id: string; name: string }[] = [];
  for await (const names of scanKeys(redis, redisNames.recordPattern, 2000)) {
    for (const name of names) {
      const record = redisNames.parseRecord(name);
      if (record) found.push({ ...record, name });
    }
  }
  const wallets = await sql<{ wallet: string }[]>`
    SELECT wallet FROM credits UNION SELECT wallet FROM api_keys UNION SELECT wallet FROM ledger_events WHERE type = 'charge'`;
  const apiKeys = await sql<{ id: number; wallet: string }[]>`SELECT id, wallet FROM api_keys`;

  const byShard = new Map(redisNames.allShards().map((s) => [s, { wallets: new Set<string>(), keyIds: new Set<number>() }]));
  const misplaced: LedgerNames["misplaced"] = [];
  const keyWallet = new Map(apiKeys.map((k) => [k.id, k.wallet]));
  for (const w of wallets) byShard.get(redisNames.shardOf(w.wallet))!.wallets.add(w.wallet);
  for (const k of apiKeys) byShard.get(redisNames.shardOf(k.wallet))!.keyIds.add(k.id);
  for (const f of found) {
    const owner = f.kind === "w" ? f.id : keyWallet.get(Number(f.id));
    const home = owner === undefined ? f.shard : redisNames.shardOf(owner);
    if (home !== f.shard || !byShard.has(f.shard)) {
      misplaced.push({ redisKey: f.name, belongsIn: byShard.has(home) ? home : "no shard" });
      continue;
    }
    if (f.kind === "w") byShard.get(home)!.wallets.add(f.id);
    else if (/^\d+$/.test(f.id)) byShard.get(home)!.keyIds.add(Number(f.id));
  }
  return { byShard, misplaced };
}
