import { join } from "node:path";
import type { Config } from "./config.ts";
import { startEmbeddedPostgres } from "./embedded/postgres.ts";
import { startEmbeddedRedis } from "./embedded/redis.ts";
import { log } from "./log.ts";
import type { RedisTarget } from "./redis/target.ts";
import type { Connections } from "./wiring.ts";

/** The Redis and Postgres this process uses: external ones from the URLs, or embedded ones in DATA_DIR. */
export interface Stack {
  connections: Connections;
  stop(): Promise<void>;
}

/** Starts only what is not configured: no REDIS_URL nor REDIS_CLUSTER_NODES → private redis-server; no DATABASE_URL → embedded Postgres (native, or PGlite). */
export async function openStack(config: Config): Promise<Stack> {
  const stops: (() => Promise<void>)[] = [];
  let redis: RedisTarget | undefined = config.redisCluster ?? config.redisUrl;
  if (!redis) {
    const r = await startEmbeddedRedis(join(config.dataDir, "redis"));
    stops.push(r.stop);
    redis = r.socket;
    const how = r.started
      ? "embedded redis-server started"
      : r.adopted
        ? "took over the embedded redis-server a stopped process left running in DATA_DIR"
        : "joined the embedded redis-server already serving DATA_DIR";
    log.info(how, { socket: r.socket });
  }
  let database: Connections["database"] = { url: config.databaseUrl ?? "" };
  if (!config.databaseUrl) {
    const pg = await startEmbeddedPostgres(join(config.dataDir, "postgres"));
    stops.push(pg.stop);
    database = { url: pg.url, path: pg.path, max: pg.maxConnections };
    log.info(pg.engine === "native" ? "embedded Postgres (native)" : "embedded Postgres (PGlite)", { socket: pg.path });
  }
  return {
    connections: { redis, database },
    async stop() {
      for (const stop of stops.reverse()) await stop().catch((e) => log.error("embedded service stop failed", { error: e }));
    },
  };
}
