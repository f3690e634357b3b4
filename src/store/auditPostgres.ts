import type { Sql } from "./db.ts";

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
}

// settle-5 stamps a charge with Redis's clock in ms; the flusher stores it as occurred_at (exact to the ms).
const AT_MS = `(extract(epoch FROM occurred_at) * 1000)::bigint`;
const ROW = `event_id AS "eventId", wallet, api_key_id AS "keyId", amount_usdc AS amount, cost_usd_micro AS cost,
             prompt_tokens AS pt, completion_tokens AS ct, ${AT_MS} AS at`;

/**
 * Reads Postgres in one REPEATABLE READ, READ ONLY transaction: every query sees the same snapshot, taken at the
 * first one, which runs after the Redis read. So Postgres may be ahead of Redis (charges flushed or settled
 * since, credits recorded since) but never behind it; the caller sorts the extra rows out by time and event id.
 */
export function readPostgresBooks(sql: Sql, sinceMs: number, outboxEventIds: string[]): Promise<PostgresBooks> {
  return sql.begin("isolation level repeatable read, read only", async (tx) => {
    const credits = await tx<PostgresBooks["credits"]>`
      SELECT event_id AS "eventId", wallet, amount_usdc AS amount, applied_at IS NOT NULL AS applied FROM credits`;
    const keys = await tx<{ id: number; wallet: string; budget: number | null; revoked: boolean }[]>`
      SELECT id, wallet, budget_usdc AS budget, revoked_at IS NOT NULL AS revoked FROM api_keys`;
    const chargesBefore = await tx<ChargeSum[]>`
      SELECT wallet, api_key_id AS "keyId", SUM(amount_usdc)::bigint AS amount, COUNT(*)::bigint AS count,
             SUM(prompt_tokens)::bigint AS pt, SUM(completion_tokens)::bigint AS ct,
             SUM(amount_usdc - cost_usd_micro)::bigint AS revenue
      FROM ledger_events WHERE type = 'charge' AND ${tx.unsafe(AT_MS)} < ${sinceMs}
      GROUP BY wallet, api_key_id`;
    const chargesSince = await tx<ChargeRow[]>`
      SELECT ${tx.unsafe(ROW)} FROM ledger_events WHERE type = 'charge' AND ${tx.unsafe(AT_MS)} >= ${sinceMs}`;
    const chargesInOutbox = outboxEventIds.length === 0 ? [] : await tx<ChargeRow[]>`
      SELECT ${tx.unsafe(ROW)} FROM ledger_events WHERE event_id = ANY(${tx.array(outboxEventIds)}::text[])`;
    const [pending] = await tx<PostgresBooks["pendingSettles"][]>`
      SELECT COUNT(*)::bigint AS count, COALESCE(SUM(charge_usdc), 0)::bigint AS amount,
             COUNT(*) FILTER (WHERE unresolved)::bigint AS unresolved
      FROM pending_settles`;
    return {
      credits: [...credits],
      apiKeys: new Map(keys.map((k) => [k.id, { wallet: k.wallet, budget: k.budget, revoked: k.revoked }])),
      chargesBefore: [...chargesBefore],
      chargesSince: [...chargesSince],
      chargesInOutbox: [...chargesInOutbox],
      pendingSettles: pending!,
    };
  }) as Promise<PostgresBooks>;
}
