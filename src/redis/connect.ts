import { Cluster, Redis } from "ioredis";
import { log } from "../log.ts";
import { ClusterRouter } from "./clusterRouter.ts";
import { type KeyRouter, SingleRouter } from "./router.ts";
import { describeTarget, isCluster, type RedisTarget } from "./target.ts";

/**
 * ioredis for everything off the hot path (keys, SIWE replay guard, rebuild, audit): one Redis, or a Redis
 * Cluster, which routes each command by its key and follows MOVED/ASK and failovers. Code that needs every node
 * (SCAN, INFO) goes through `masterNodes`.
 */
export type RedisCommands = Redis | Cluster;

/** The two faces of one Redis setup: ioredis commands and the hot-path router. */
export interface RedisClients {
  commands: RedisCommands;
  router: KeyRouter;
}

// Reconnect attempts at most 500 ms apart, so a command fails (maxRetriesPerRequest) within ~2 s of an outage
// instead of ioredis' 2 s steps, and the first command after Redis returns is not held back long.
const retryStrategy = (times: number) => Math.min(times * 50, 500);

/** Opens the clients of a target; connections are made in the background (commands queue until ready). */
export function openRedis(target: RedisTarget): RedisClients {
  let commands: RedisCommands;
  let router: KeyRouter;
  if (isCluster(target)) {
    const cluster = new Cluster(target.cluster, {
      redisOptions: { password: target.password, maxRetriesPerRequest: 3 },
      // A promoted replica is found within a second even when no command has hit the failed master yet.
      slotsRefreshInterval: 1_000,
      retryDelayOnFailover: 200,
      clusterRetryStrategy: (times) => Math.min(100 + times * 100, 1_000),
    });
    commands = cluster;
    router = new ClusterRouter(cluster, target.password);
  } else {
    commands = new Redis(target, { maxRetriesPerRequest: 3, retryStrategy });
    router = SingleRouter.open(target);
  }
  // ioredis reconnects by itself; without a listener it prints a stack trace per attempt. One line per outage.
  let down = false;
  commands.on("error", (e: Error) => {
    if (!down) log.error("Redis connection lost; reconnecting", { redis: describeTarget(target), error: e.message });
    down = true;
  });
  commands.on("ready", () => {
    if (down) log.info("Redis connection restored");
    down = false;
  });
  return { commands, router };
}

/** The nodes to run a per-node command on (SCAN, INFO): the one Redis, or every master of the cluster. */
export function masterNodes(redis: RedisCommands): Redis[] {
  return redis instanceof Cluster ? redis.nodes("master") : [redis];
}

/** Every key matching `match`, SCANned on every master (a cluster's SCAN sees only the node it runs on). */
export async function* scanKeys(redis: RedisCommands, match: string, count = 1000): AsyncGenerator<string[]> {
  for (const node of masterNodes(redis)) {
    let cursor = "0";
    do {
      const [next, names] = await node.scan(cursor, "MATCH", match, "COUNT", count);
      cursor = next;
      if (names.length > 0) yield names;
    } while (cursor !== "0");
  }
}

/**
 * Runs independent commands in chunks of `size`, each chunk in flight together (ioredis writes a command without
 * waiting for the previous reply): the replacement for an explicit pipeline, which a cluster refuses across nodes.
 */
export async function inChunks<T, R>(items: readonly T[], run: (item: T) => Promise<R>, size = 1000): Promise<R[]> {
  const out: R[] = [];
  for (let i = 0; i < items.length; i += size) out.push(...(await Promise.all(items.slice(i, i + size).map(run))));
  return out;
}
