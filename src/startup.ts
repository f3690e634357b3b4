import { existsSync } from "node:fs";
import { join } from "node:path";
import { Redis } from "ioredis";
import postgres from "postgres";
import type { Config } from "./config.ts";
import { redactText } from "./log.ts";
import { type ClusterTarget, isCluster } from "./redis/target.ts";
import type { Connections } from "./wiring.ts";

const PROBE_TIMEOUT_MS = 5_000;

/** A start-up failure an operator can act on: main prints its message as one line and exits 1. */
export class StartupError extends Error {}

/** Where a connection points, without credentials: host:port of a URL, or the socket path. */
function where(target: string): string {
  try {
    const u = new URL(target);
    return u.host || target;
  } catch {
    return target;
  }
}

function reason(e: unknown): string {
  const err = e as { code?: string; message?: string };
  return redactText(err?.code ?? err?.message ?? String(e))
    .split("\n")[0]!
    .slice(0, 200);
}

/**
 * Checks that Redis and Postgres answer before anything is built on them, so a dependency that is down is one
 * line naming it rather than retries, reconnect logs and a stack trace.
 */
export async function checkDependencies(conn: Connections): Promise<void> {
  if (isCluster(conn.redis)) await probeCluster(conn.redis);
  else await probeRedis(conn.redis);
  const sql = postgres(conn.database.url, {
    path: conn.database.path,
    max: 1,
    connect_timeout: PROBE_TIMEOUT_MS / 1000,
    onnotice: () => {},
  });
  try {
    await sql`SELECT 1`;
  } catch (e) {
    const at = conn.database.path ?? where(conn.database.url);
    throw new StartupError(`Postgres at ${at} is not reachable (${reason(e)}); check DATABASE_URL or that Postgres runs`);
  } finally {
    await sql.end({ timeout: 1 }).catch(() => {});
  }
}

async function probeRedis(target: string): Promise<void> {
  let redisError: unknown;
  const redis = new Redis(target, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: PROBE_TIMEOUT_MS,
  });
  redis.on("error", (e) => (redisError ??= e));
  try {
    await redis.connect();
    await redis.ping();
  } catch (e) {
    throw new StartupError(
      `Redis at ${where(target)} is not reachable (${reason(redisError ?? e)}); check REDIS_URL or that redis-server runs`,
    );
  } finally {
    redis.disconnect();
  }
}

/**
 * A cluster needs one seed that answers, runs in cluster mode and reports the cluster healthy (every slot served);
 * the gateway's Cluster client finds the other nodes from it.
 */
async function probeCluster(target: ClusterTarget): Promise<void> {
  const problems: string[] = [];
  for (const seed of target.cluster) {
    let error: unknown;
    const node = new Redis({
      ...seed,
      password: target.password,
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      connectTimeout: PROBE_TIMEOUT_MS,
    });
    node.on("error", (e) => (error ??= e));
    try {
      await node.connect();
      const info = await node.info("cluster");
      if (!/cluster_enabled:1/.test(info))
        throw new StartupError(
          `${seed.host}:${seed.port} is a Redis without cluster mode; use REDIS_URL for it, or point REDIS_CLUSTER_NODES at a Redis Cluster`,
        );
      const state = /cluster_state:(\w+)/.exec((await node.call("CLUSTER", "INFO")) as string)?.[1];
      if (state === "ok") return;
      problems.push(`${seed.host}:${seed.port}: cluster_state ${state ?? "unknown"}`);
    } catch (e) {
      if (e instanceof StartupError) throw e;
      problems.push(`${seed.host}:${seed.port}: ${reason(error ?? e)}`);
    } finally {
      node.disconnect();
    }
  }
  throw new StartupError(
    `no node of REDIS_CLUSTER_NODES serves a healthy Redis Cluster (${problems.join("; ")}); check the seeds and CLUSTER INFO`,
  );
}

/**
 * The admin command joins the gateway's embedded services in DATA_DIR. Where DATA_DIR holds none (run from another
 * directory, a DATA_DIR typo), starting fresh ones would grant into a new, empty ledger no gateway reads: refuse.
 */
export function assertEmbeddedDataExists(config: Config): void {
  const missing: string[] = [];
  const redisDir = join(config.dataDir, "redis");
  if (
    !config.redisUrl &&
    !config.redisCluster &&
    !["redis.sock", "appendonlydir", "appendonly.aof"].some((f) => existsSync(join(redisDir, f)))
  )
    missing.push("Redis");
  const pgDir = join(config.dataDir, "postgres");
  if (!config.databaseUrl && !existsSync(join(pgDir, "pgdata")) && !existsSync(join(pgDir, ".s.PGSQL.5432"))) missing.push("Postgres");
  if (missing.length > 0) {
    throw new StartupError(
      `no gateway data in ${config.dataDir} (embedded ${missing.join(" and ")} not found): run where the gateway runs, set DATA_DIR to its data directory, or set REDIS_URL and DATABASE_URL`,
    );
  }
}

/** One line for a failure to listen: the port taken is the common case. */
export function listenError(e: unknown, config: Config): StartupError {
  if ((e as { code?: string })?.code === "EADDRINUSE") {
    return new StartupError(`port ${config.port} on ${config.host} is already in use; stop the other process or set PORT`);
  }
  return new StartupError(`cannot listen on ${config.host}:${config.port} (${reason(e)})`);
}
