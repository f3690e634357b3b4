import type { Redis } from "ioredis";
import { ConfigError } from "../errors.ts";
import type { RedisNames } from "../ledger/names.ts";

/** Start-up refusals for a Redis that cannot hold the ledger safely; each throws one ConfigError line. */
export async function checkRedisForLedger(redis: Redis, redisNames: RedisNames): Promise<void> {
  await checkEvictionPolicy(redis);
  await recordShardCount(redis, redisNames);
}

/** A Redis that may evict keys under memory pressure could silently drop a balance, a hold or a credit mark. */
export async function checkEvictionPolicy(redis: Redis): Promise<void> {
  const policy = /maxmemory_policy:(\S+)/.exec(await redis.info("memory"))?.[1];
  if (policy !== undefined && policy !== "noeviction") {
    throw new ConfigError("REDIS_URL", `this Redis evicts keys (maxmemory-policy ${policy}); the ledger needs maxmemory-policy noeviction`);
  }
}

/**
 * Records LEDGER_SHARDS on first start (and after a data loss, with the rebuild), and refuses another value:
 * the shard count decides where every wallet's keys live, so a changed value would lose every balance.
 */
export async function recordShardCount(redis: Redis, redisNames: RedisNames): Promise<void> {
  await redis.set(redisNames.shardCount, String(redisNames.shards), "NX");
  const recorded = await redis.get(redisNames.shardCount);
  if (recorded !== null && recorded !== String(redisNames.shards)) {
    throw new ConfigError("LEDGER_SHARDS", `is ${redisNames.shards}, but the ledger in this Redis was built with ${recorded} shards (a change would move every wallet); set LEDGER_SHARDS=${recorded}`);
  }
}
