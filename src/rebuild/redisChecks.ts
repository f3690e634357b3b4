import { Cluster } from "ioredis";
import { ConfigError } from "../errors.ts";
import type { RedisNames } from "../ledger/names.ts";
import { masterNodes, type RedisCommands } from "../redis/connect.ts";

/** Start-up refusals for a Redis that cannot hold the ledger safely; each throws one ConfigError line. */
export async function checkRedisForLedger(redis: RedisCommands, redisNames: RedisNames): Promise<void> {
  await checkEvictionPolicy(redis);
  await recordShardCount(redis, redisNames);
}

/**
 * A Redis that may evict keys under memory pressure could silently drop a balance, a hold or a credit mark. On a
 * cluster every master is asked (each holds its own shards). A replica promoted later keeps its own setting, so
 * operators set the policy on every node (docs/operating.md, Scaling out).
 */
export async function checkEvictionPolicy(redis: RedisCommands): Promise<void> {
  const cluster = redis instanceof Cluster;
  for (const node of masterNodes(redis)) {
    const policy = /maxmemory_policy:(\S+)/.exec(await node.info("memory"))?.[1];
    if (policy !== undefined && policy !== "noeviction") {
      const which = cluster ? `the cluster master ${node.options.host}:${node.options.port}` : "this Redis";
      throw new ConfigError(
        cluster ? "REDIS_CLUSTER_NODES" : "REDIS_URL",
        `${which} evicts keys (maxmemory-policy ${policy}); the ledger needs maxmemory-policy noeviction`,
      );
    }
  }
}

/**
 * Records LEDGER_SHARDS on first start (and after a data loss, with the rebuild), and refuses another value:
 * the shard count decides where every wallet's keys live, so a changed value would lose every balance.
 */
export async function recordShardCount(redis: RedisCommands, redisNames: RedisNames): Promise<void> {
  await redis.set(redisNames.shardCount, String(redisNames.shards), "NX");
  const recorded = await redis.get(redisNames.shardCount);
  if (recorded !== null && recorded !== String(redisNames.shards)) {
    throw new ConfigError(
      "LEDGER_SHARDS",
      `is ${redisNames.shards}, but the ledger in this Redis was built with ${recorded} shards (a change would move every wallet); set LEDGER_SHARDS=${recorded}`,
    );
  }
}
