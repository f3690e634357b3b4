import { Counter, Gauge, Histogram, Registry } from "./promClient.ts";

/**
 * The process's Prometheus metrics. Everything counted on the request path is an in-memory counter (no Redis
 * call is added to chat); what lives in Redis or Postgres is read once per scrape (see scrape.ts).
 */
export const registry = new Registry();
const registers = [registry];

const SECONDS_FAST = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];
const SECONDS_SLOW = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

/** Every metric by name; call sites import this object and count, nothing else. */
export const metrics = {
  httpRequests: new Counter({
    name: "gateway_http_requests_total",
    help: "HTTP requests answered, by route pattern (never the raw path) and status",
    labelNames: ["method", "route", "status"] as const,
    registers,
  }),
  httpDuration: new Histogram({
    name: "gateway_http_request_duration_seconds",
    help: "Time until the response (its headers, for a stream) was handed to the server, by route pattern",
    labelNames: ["method", "route"] as const,
    buckets: SECONDS_SLOW,
    registers,
  }),
  addedLatency: new Histogram({
    name: "gateway_chat_added_latency_seconds",
    help: "Chat completions: gateway time excluding the wait on the provider (to its first byte, for streams)",
    labelNames: ["stream"] as const,
    buckets: SECONDS_FAST,
    registers,
  }),
  upstreamLatency: new Histogram({
    name: "gateway_upstream_latency_seconds",
    help: "Provider time: the whole answer (JSON) or until its first byte (stream)",
    labelNames: ["provider", "stream"] as const,
    buckets: SECONDS_SLOW,
    registers,
  }),
  upstreamErrors: new Counter({
    name: "gateway_upstream_errors_total",
    help: "Provider failures by provider and HTTP status, or timeout, network, bad_body, stream_broken",
    labelNames: ["provider", "status"] as const,
    registers,
  }),
  reserves: new Counter({
    name: "gateway_reserves_total",
    help: "Reserve outcomes: ok, or the refusal code (INSUFFICIENT_BALANCE, KEY_BUDGET_EXCEEDED, RATE_LIMITED, UNAUTHORIZED)",
    labelNames: ["outcome"] as const,
    registers,
  }),
  leaseAdmissions: new Counter({
    name: "gateway_lease_admissions_total",
    help: "Chat-path admissions with credit leases on: lease (admitted in memory) or reserve (sent to Redis first)",
    labelNames: ["outcome"] as const,
    registers,
  }),
  settles: new Counter({
    name: "gateway_settles_total",
    help: "Settle calls by outcome: charged, settled / released (resolved before), UNKNOWN_HOLD, error",
    labelNames: ["outcome"] as const,
    registers,
  }),
  settlesAboveHold: new Counter({
    name: "gateway_settles_above_hold_total",
    help: "Charges above their hold (a reserve-bound defect; still charged), from the chat service's count",
    registers,
  }),
  settlesAboveHoldUsdc: new Counter({
    name: "gateway_settles_above_hold_usdc_total",
    help: "µUSDC charged above the holds of those settles",
    registers,
  }),
  settlesDeferred: new Counter({
    name: "gateway_settles_deferred_total",
    help: "Settles that could not reach Redis and were kept in Postgres (pending_settles) for the repair job",
    registers,
  }),
  releases: new Counter({
    name: "gateway_releases_total",
    help: "Holds voided without a charge: release (provider failed) or expire (sweeper)",
    labelNames: ["reason"] as const,
    registers,
  }),
  // Set at scrape time from the tallies below, not on every reserve and settle: a gauge set hashes its labels.
  holdsOpen: new Gauge({
    name: "gateway_holds_open",
    help: "Holds this process reserved and has not settled or released yet (in process)",
    registers,
    collect() {
      this.set(open.size);
    },
  }),
  lockedUsdc: new Gauge({
    name: "gateway_locked_usdc",
    help: "µUSDC locked by this process's open holds (in process)",
    registers,
    collect() {
      this.set(locked);
    },
  }),
  flushBatches: new Counter({ name: "gateway_flusher_batches_total", help: "Outbox batches written to Postgres", registers }),
  flushEvents: new Counter({ name: "gateway_flusher_events_total", help: "Outbox entries written to Postgres", registers }),
  flushFailures: new Counter({ name: "gateway_flusher_failures_total", help: "Flusher rounds that failed (retried)", registers }),
  // Read at scrape time (scrape.ts).
  ledgerHolds: new Gauge({
    name: "gateway_ledger_holds",
    aggregator: "first", // read from Redis or Postgres at scrape: one value for all workers
    help: "Live holds in Redis, every gateway process included (ZCARD per shard, read at scrape)",
    registers,
  }),
  outboxEntries: new Gauge({
    name: "gateway_outbox_entries",
    aggregator: "first", // read from Redis or Postgres at scrape: one value for all workers
    help: "Ledger events in the Redis outbox not yet in Postgres (XLEN per shard, read at scrape)",
    registers,
  }),
  outboxLag: new Gauge({
    name: "gateway_outbox_lag_seconds",
    aggregator: "first", // read from Redis or Postgres at scrape: one value for all workers
    help: "Age of the oldest outbox entry not yet in Postgres; 0 when the outbox is empty (read at scrape)",
    registers,
  }),
  pendingSettles: new Gauge({
    name: "gateway_pending_settles",
    aggregator: "first", // read from Redis or Postgres at scrape: one value for all workers
    help: "Charges kept in Postgres waiting for the repair job, unresolved ones included (read at scrape)",
    registers,
  }),
  paymentChecks: new Gauge({
    name: "gateway_payment_checks_open",
    aggregator: "first", // read from Redis or Postgres at scrape: one value for all workers
    help: "Unconfirmed settlements still being checked on chain (read at scrape)",
    registers,
  }),
  redisUp: new Gauge({ name: "gateway_redis_up", help: "1 when Redis answered the scrape's PING in time", aggregator: "first", registers }),
  postgresUp: new Gauge({
    name: "gateway_postgres_up",
    help: "1 when Postgres answered the scrape's SELECT 1 in time",
    aggregator: "first",
    registers,
  }),
  // One series per process: with WORKERS > 1, what each added worker costs in memory.
  residentBytes: new Gauge({
    name: "gateway_process_resident_memory_bytes",
    help: "Resident memory of each gateway process, by worker (0: the first serving process; background: the background process)",
    labelNames: ["worker"] as const,
    registers,
    collect() {
      this.set({ worker: workerLabel }, process.memoryUsage.rss());
    },
  }),
};

let workerLabel = "0";

/** Names this process among the gateway's workers (the residentBytes series). */
export function setWorkerLabel(worker: number | "background"): void {
  workerLabel = String(worker);
}

// This process's open holds: the amount of each, so its settle or release can take it off the gauge.
const open = new Map<string, number>();
let locked = 0;

/** A reserve succeeded: the hold counts as open until it is resolved. */
export function holdOpened(holdId: string, amount: number): void {
  if (open.has(holdId)) return;
  open.set(holdId, amount);
  locked += amount;
}

/** The hold was settled, released or expired (or found resolved): it no longer locks anything here. */
export function holdClosed(holdId: string): void {
  const amount = open.get(holdId);
  if (amount === undefined) return;
  open.delete(holdId);
  locked -= amount;
}
