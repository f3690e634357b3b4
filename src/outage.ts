/**
 * Tells a dependency outage (Redis or Postgres unreachable, closed under us, or not answering in time) from a bug,
 * so a request that failed because of one answers 503 SERVICE_UNAVAILABLE, not 500. One place, for both clients
 * of Redis (Bun's, ioredis) and for postgres.js.
 */
export type Dependency = "redis" | "postgres";

/** Raised by our own guards: a call that did not answer within its deadline, or a dependency known to be down. */
export class DependencyDown extends Error {
  constructor(
    readonly dependency: Dependency,
    message: string,
  ) {
    super(message);
    this.name = "DependencyDown";
  }

  /** A call to `dependency` that did not answer within `ms`: the `late` of a withDeadline (deadline.ts). */
  static late(dependency: Dependency, what: string, ms: number): DependencyDown {
    return new DependencyDown(dependency, `${what} did not answer within ${ms} ms`);
  }
}

// A Redis reply that means "not now" rather than "wrong": loading its data, a script running too long, a replica
// that cannot take writes, a cluster in failover, out of memory.
const REDIS_TRANSIENT = /^(LOADING|BUSY|MASTERDOWN|READONLY|TRYAGAIN|CLUSTERDOWN|OOM|NOREPLICAS)\b/;
// ioredis' Cluster giving up on a command it could not route: redirected or cut off past maxRedirections while a
// master fails over, no slot map (every node refused the refresh), or no node to start from.
const IOREDIS_CLUSTER =
  /^(Too many Cluster redirections\b|None of startup nodes is available$|Failed to refresh slots cache\.$|Cluster isn't ready and enableOfflineQueue)/;
// postgres.js' own codes for a connection lost or never made.
const PG_CONNECTION = new Set(["CONNECTION_CLOSED", "CONNECTION_ENDED", "CONNECTION_DESTROYED", "CONNECT_TIMEOUT"]);
// Socket errors of a connect or a live connection (postgres.js passes them on unchanged).
const SOCKET = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ENOENT",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EAI_AGAIN",
  "ENOTFOUND",
]);

function fields(e: unknown): { name: string; code: string; message: string; syscall: string } {
  const x = (typeof e === "object" && e !== null ? e : {}) as Record<string, unknown>;
  return { name: String(x.name ?? ""), code: String(x.code ?? ""), message: String(x.message ?? ""), syscall: String(x.syscall ?? "") };
}

/** True when `e` says Redis is unreachable or cannot serve now (either client). */
export function isRedisDown(e: unknown): boolean {
  if (e instanceof DependencyDown) return e.dependency === "redis";
  const { name, code, message } = fields(e);
  if (code.startsWith("ERR_REDIS_CONNECTION") || code === "ERR_REDIS_IDLE_TIMEOUT") return true; // Bun's client
  if (name === "MaxRetriesPerRequestError" || message === "Connection is closed." || message.startsWith("Stream isn't writeable"))
    return true; // ioredis
  if (name === "ClusterAllFailedError" || IOREDIS_CLUSTER.test(message)) return true; // ioredis' Cluster
  return REDIS_TRANSIENT.test(message);
}

/** True when `e` says Postgres is unreachable: no connection could be made, or it was lost mid-query. */
export function isPostgresDown(e: unknown): boolean {
  if (e instanceof DependencyDown) return e.dependency === "postgres";
  const { name, code, syscall } = fields(e);
  if (PG_CONNECTION.has(code)) return true;
  // ENOENT is a missing unix socket only when connecting, not a missing file.
  if (SOCKET.has(code) && (code !== "ENOENT" || syscall === "connect")) return true;
  // Server-side: class 08 (connection exception), shutting down / starting up, too many connections.
  return (
    name === "PostgresError" && (code.startsWith("08") || code === "57P01" || code === "57P02" || code === "57P03" || code === "53300")
  );
}

/** Which dependency `e` says is down, if any. */
export function outageOf(e: unknown): Dependency | undefined {
  if (isRedisDown(e)) return "redis";
  if (isPostgresDown(e)) return "postgres";
  return undefined;
}
