/**
 * Writes caught between the two stores while the audit reads (audit.ts, step 3): credits Redis applied that
 * Postgres has yet to record, and Postgres writes whose Redis half landed after the shard's read.
 */
import type { RedisNames } from "../ledger/names.ts";
import { inChunks, type RedisCommands } from "../redis/connect.ts";
import type { CreditInput } from "../store/credits.ts";

/**
 * Credits applied in Redis while Postgres was down (Credits.addSettled), by event id. Read after the shards and
 * before the Postgres snapshot: such a credit leaves this hash only once Postgres has it, so every credit the
 * shards showed is in one or the other.
 */
export async function readCreditOutbox(redis: RedisCommands, redisNames: RedisNames): Promise<Map<string, CreditInput>> {
  const all = await redis.hgetall(redisNames.creditOutbox);
  return new Map(Object.entries(all).map(([id, json]) => [id, JSON.parse(json) as CreditInput]));
}

/** Credits and keys whose Redis half landed after their shard's read (see `writtenSinceRead`). */
export interface LateWrites {
  credits: Set<string>;
  keys: Set<number>;
}

/**
 * Postgres is written first, Redis second (credits, key creation, revocation), so the Postgres snapshot can show
 * a write whose Redis half came after the shard's read. Asked again now: a credit Redis has applied since, or a
 * key Redis has since created or revoked, is that, not a difference.
 */
export async function writtenSinceRead(
  redis: RedisCommands,
  redisNames: RedisNames,
  candidates: { credits: { eventId: string; wallet: string }[]; keys: { id: number; wallet: string; revoked: boolean }[] },
): Promise<LateWrites> {
  const late: LateWrites = { credits: new Set(), keys: new Set() };
  if (candidates.credits.length + candidates.keys.length === 0) return late;
  const credited = await inChunks(candidates.credits, (c) => redis.hexists(redisNames.credited(redisNames.shardOf(c.wallet)), c.eventId));
  const revokedNow = await inChunks(candidates.keys, (k) => redis.hget(redisNames.apiKey(redisNames.shardOf(k.wallet), k.id), "revoked"));
  candidates.credits.forEach((c, i) => credited[i] === 1 && late.credits.add(c.eventId));
  candidates.keys.forEach((k, i) => {
    const revoked = revokedNow[i];
    if (revoked === (k.revoked ? "1" : "0")) late.keys.add(k.id);
  });
  return late;
}
