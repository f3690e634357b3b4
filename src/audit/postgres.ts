import type { Sql } from "../store/db.ts";

/** Charges summed per (wallet, key). */
export interface ChargeSum {
  wallet: string;
  keyId: number;
  amount: number;
  count: number;
  pt: number;
  ct: number;
  revenue: number;
}

/** One charge row of ledger_events, with its Redis-clock time in ms. */
export interface ChargeRow {
  eventId: string;
  wallet: string;
  keyId: number;
  amount: number;
  cost: number;
  pt: number;
  ct: number;
  at: number;
}

/** What Postgres knows, from one snapshot. */
export interface PostgresBooks {
  credits: { eventId: string; wallet: string; amount: number; applied: boolean }[];
  apiKeys: Map<number, { wallet: string; budget: number | null; revoked: boolean }>;
  /** Charges stamped before `sinceMs`, summed. */
  chargesBefore: ChargeSum[];
  /** Charges stamped at or after `sinceMs`, one by one: whether each counts depends on its shard's read time. */
  chargesSince: ChargeRow[];
  /** Charges whose event id the caller saw in the outbox (flushed since the Redis read, or not yet deleted). */
  chargesInOutbox: ChargeRow[];
  pendingSettles: { count: number; amount: number; unresolved: number };
  /** x402 `upto` calls served whose on-chain settlement is not made yet (docs/payments.md); `failing`: tried and failed. */
  uptoSettles: { count: number; amount: number; failing: number };
}

// settle-batch stamps a charge with Redis's clock in ms; the flusher stores it as occurred_at (exact to the ms).
const AT_MS = `(extract(epoch FROM occurred_at) * 1000)::bigint`;
const ROW = `event_id AS "eventId", wallet, api_key_id AS "keyId", amount_usdc AS amount, cost_usd_micro AS cost,
             prompt_tokens AS pt, completion_tokens AS ct, ${AT_MS} AS at`;
const rows = (query: string) => `COALESCE((SELECT json_agg(r) FROM (${query}) r), '[]')`;

/**
 * Reads Postgres in ONE statement: every part of it sees the same snapshot, taken when it starts, after the Redis
 * read (a transaction would do the same on a server, but embedded PGlite serves all connections from one session,
 * where a transaction held across round trips tangles with the gateway's queries). So Postgres may be ahead of
 * Redis (charges flushed or settled since, credits recorded since) but never behind it; the caller sorts the
 * extra rows out by time and event id.
 */
export async function readPostgresBooks(sql: Sql, sinceMs: number, outboxEventIds: string[]): Promise<PostgresBooks> {
  const raw = sql.unsafe;
  const [r] = await sql`
    SELECT
      ${raw(rows(`SELECT event_id AS "eventId", wallet, amount_usdc AS amount, applied_at IS NOT NULL AS applied FROM credits`))} AS credits,
      ${raw(rows(`SELECT id, wallet, budget_usdc AS budget, revoked_at IS NOT NULL AS revoked FROM api_keys`))} AS keys,
      COALESCE((SELECT json_agg(r) FROM (
        SELECT wallet, api_key_id AS "keyId", SUM(amount_usdc) AS amount, COUNT(*) AS count, SUM(prompt_tokens) AS pt,
               SUM(completion_tokens) AS ct, SUM(amount_usdc - cost_usd_micro) AS revenue
        FROM ledger_events WHERE type = 'charge' AND ${raw(AT_MS)} < ${sinceMs} GROUP BY wallet, api_key_id) r), '[]') AS before,
      COALESCE((SELECT json_agg(r) FROM (
        SELECT ${raw(ROW)} FROM ledger_events WHERE type = 'charge' AND ${raw(AT_MS)} >= ${sinceMs}) r), '[]') AS since,
      COALESCE((SELECT json_agg(r) FROM (
        SELECT ${raw(ROW)} FROM ledger_events WHERE event_id = ANY(${sql.array(outboxEventIds)}::text[])) r), '[]') AS in_outbox,
      ${raw(
        rows(`SELECT COUNT(*) AS count, COALESCE(SUM(charge_usdc), 0) AS amount, COUNT(*) FILTER (WHERE unresolved) AS unresolved
                  FROM pending_settles`),
      )} AS pending,
      ${raw(
        rows(`SELECT COUNT(*) AS count, COALESCE(SUM(COALESCE(charge_usdc, max_usdc)), 0) AS amount,
                     COUNT(*) FILTER (WHERE last_error IS NOT NULL) AS failing
                  FROM upto_settles WHERE state <> 'settled'`),
      )} AS upto`;
  const keys = r!.keys as { id: number; wallet: string; budget: number | null; revoked: boolean }[];
  return {
    credits: r!.credits,
    apiKeys: new Map(keys.map((k) => [k.id, { wallet: k.wallet, budget: k.budget, revoked: k.revoked }])),
    chargesBefore: r!.before,
    chargesSince: r!.since,
    chargesInOutbox: r!.in_outbox,
    pendingSettles: r!.pending[0],
    uptoSettles: r!.upto[0],
  };
}
