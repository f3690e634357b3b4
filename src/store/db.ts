import postgres from "postgres";

/** The postgres.js client type used across the store. */
export type Sql = postgres.Sql<{ bigint: number }>;

/**
 * Opens the pool. BIGINT columns come back as JS numbers: every µUSDC amount fits 2^53 (9e9 USD).
 * `max` is small for PGlite, which runs one query at a time anyway.
 */
export function openDatabase(url: string, opts: { max?: number; path?: string } = {}): Sql {
  return postgres(url, {
    path: opts.path,
    max: opts.max ?? 10,
    onnotice: () => {},
    types: { bigint: { to: 20, from: [20], serialize: (x: number) => String(x), parse: (x: string) => Number(x) } },
    transform: { undefined: null },
    connection: { application_name: "llm-gateway" },
  }) as unknown as Sql;
}
