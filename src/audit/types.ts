/** The result of one audit pass (compare.ts builds it, report.ts prints it), apart from both so either can name it. */

/** A field where Redis disagrees with what it should hold (from Postgres and the outbox, or from the live holds). */
export interface Difference {
  /** What disagrees: "wallet 0x…", "key 12", "credit <event id>", "redis <key name>". */
  subject: string;
  field: string;
  redis: number | string | null;
  expected: number | string | null;
  unit: "usd" | "count" | "text";
  /** Redis state Postgres does not know, which a rebuild (it writes only what Postgres has) would leave behind. */
  stray?: { key: string; field?: string };
}

/** One compared sum: Redis's and the expected one. */
export interface Total {
  label: string;
  redis: number;
  expected: number;
  unit: "usd" | "count";
}

/** Money on its way, not a difference: in the outbox, held, deferred or waiting to be applied. */
export interface InFlight {
  label: string;
  count: number;
  usdc: number;
  note?: string;
}

/** What one pass found: the differences, the sums compared, and the money on its way. */
export interface AuditPass {
  differences: Difference[];
  totals: Total[];
  inFlight: InFlight[];
}
