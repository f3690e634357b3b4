import postgres from "postgres";

/** The postgres.js client type used across the store. */
export type Sql = postgres.Sql<{ bigint: number }>;

// postgres.js waits a growing backoff (up to 20 s, shared by the pool) before it connects again after a failed
// connect, so requests stalled for up to 16 s after Postgres came back. A refused connect costs nothing: try again
// at once. A host that does not answer at all is given a few seconds (default 30); PgHealth fails requests fast
// meanwhile.
const CONNECT_TIMEOUT_S = 5;
// postgres.js 3.4.9 is patched (patches/postgres@3.4.9.patch, applied by `bun install`): a connection whose socket
// closed while a query's bytes waited for the next tick kept that flush marked as scheduled, so it never sent its
// startup message again: every later use of it waited out the connect timeout and failed, long after Postgres was
// back (one such connection per outage under load). The patch forgets the buffered bytes with the socket.

/**
 * Opens the pool. BIGINT columns come back as JS numbers: every µUSDC amount fits 2^53 (9e9 USD).
 * `max` is small for PGlite, which runs one query at a time anyway. `debug` sees every query sent (tests count them).
 */
export function openDatabase(
  url: string,
  opts: { max?: number; path?: string; connectTimeoutS?: number; debug?: (connection: number, query: string) => void } = {},
): Sql {
  return postgres(url, {
    path: opts.path,
    max: opts.max ?? 10,
    backoff: () => 0,
    connect_timeout: opts.connectTimeoutS ?? CONNECT_TIMEOUT_S,
    debug: opts.debug,
    onnotice: () => {},
    types: { bigint: { to: 20, from: [20], serialize: (x: number) => String(x), parse: (x: string) => Number(x) } },
    transform: { undefined: null },
    connection: { application_name: "llm-gateway" },
  }) as unknown as Sql;
}
