import { existsSync } from "node:fs";
import { join } from "node:path";
import { Redis } from "ioredis";
import postgres from "postgres";
import type { Config } from "./config.ts";
import { redactText } from "./log.ts";
import type { Connections } from "./services.ts";

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
  return redactText(err?.code ?? err?.message ?? String(e)).split("\n")[0]!.slice(0, 200);
}

/**
 * Checks that Redis and Postgres answer before anything is built on them, so a dependency that is down is one
 * line naming it rather than retries, reconnect logs and a stack trace.
 */
export async function checkDependencies(conn: Connections): Promise<void> {
  let redisError: unknown;
  const redis = new Redis(conn.redis, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: PROBE_TIMEOUT_MS });
  redis.on("error", (e) => (redisError ??= e));
  try {
    await redis.connect();
    await redis.ping();
  } catch (e) {
    throw new StartupError(`Redis at ${where(conn.redis)} is not reachable (${reason(redisError ?? e)}); check REDIS_URL or that redis-server runs`);
  } finally {
    redis.disconnect();
  }
  const sql = postgres(conn.database.url, { path: conn.database.path, max: 1, connect_timeout: PROBE_TIMEOUT_MS / 1000, onnotice: () => {} });
  try {
    await sql`SELECT 1`;
  } catch (e) {
    const at = conn.database.path ?? where(conn.database.url);
    throw new StartupError(`Postgres at ${at} is not reachable (${reason(e)}); check DATABASE_URL or that Postgres runs`);
  } finally {
    await sql.end({ timeout: 1 }).catch(() => {});
  }
}

/**
 * The admin command joins the gateway's embedded services in DATA_DIR. Where DATA_DIR holds none (run from another
 * directory, a DATA_DIR typo), starting fresh ones would grant into a new, empty ledger no gateway reads: refuse.
 */
export function assertEmbeddedDataExists(config: Config): void {
  const missing: string[] = [];
  const redisDir = join(config.dataDir, "redis");
  if (!config.redisUrl && !["redis.sock", "appendonlydir", "appendonly.aof"].some((f) => existsSync(join(redisDir, f)))) missing.push("Redis");
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
