import type { Ledger } from "../ledger/ledger.ts";
import { log } from "../log.ts";
import { inChunks } from "../redis/connect.ts";
import type { Sql } from "../store/db.ts";

/**
 * How far back the periodic job looks for applied credits: a Redis that lost recent writes (failover to a
 * lagging replica, a crash with fsync every second) lost seconds, and this also covers a repair job that could
 * not run for hours. `admin audit` checks all of them.
 */
const RECENT_CREDITS_HOURS = 24;

/**
 * Postgres is the record of revocations and applied credits; a Redis that lost recent writes must not bring back
 * a revoked key or drop a credit it had applied. Runs in the 30 s repair job and after every rebuild.
 */
export async function reconcileFromPostgres(
  ledger: Ledger,
  sql: Sql,
  opts: { allCredits?: boolean } = {},
): Promise<{ revocations: number; credits: number }> {
  const revocations = await restoreRevocations(ledger, sql);
  const credits = await restoreAppliedCredits(ledger, sql, opts.allCredits ? null : RECENT_CREDITS_HOURS);
  return { revocations, credits };
}

/** Every key revoked in Postgres is revoked in Redis; returns how many Redis had lost. */
export async function restoreRevocations(ledger: Ledger, sql: Sql): Promise<number> {
  const rows = await sql<{ id: number; wallet: string }[]>`SELECT id, wallet FROM api_keys WHERE revoked_at IS NOT NULL`;
  const lost = await ledger.apiKeys.restoreRevocations(rows.map((r) => ledger.principal(r.id, r.wallet)));
  if (lost.length === 0) return 0;
  log.warn("revocations restored from Postgres (Redis had lost them)", { keys: lost.map((i) => rows[i]!.id) });
  return lost.length;
}

/**
 * Every credit Postgres marks applied (applied_at set) within `hours` (null: ever) is in Redis's `credited` hash;
 * one that is not is applied again through credit-3 (fenced, idempotent by its id). Returns how many were.
 */
export async function restoreAppliedCredits(ledger: Ledger, sql: Sql, hours: number | null): Promise<number> {
  const k = ledger.names;
  const rows = await sql<{ id: number; event_id: string; wallet: string; amount_usdc: number }[]>`
    SELECT id, event_id, wallet, amount_usdc FROM credits
    WHERE applied_at IS NOT NULL AND (${hours}::int IS NULL OR applied_at > now() - ${hours}::int * interval '1 hour')
    ORDER BY id`;
  const lost = await pick(
    rows,
    (r) => ledger.redis.hexists(k.credited(k.shardOf(r.wallet)), r.event_id),
    (v) => v !== 1,
  );
  let applied = 0;
  for (const i of lost) {
    const r = rows[i]!;
    if ((await ledger.credit(r.wallet, r.event_id, r.amount_usdc)).applied) {
      applied++;
      log.warn("applied credit missing from Redis; applied again", { credit_id: r.id, wallet: r.wallet });
    }
  }
  return applied;
}

/** Indices of `items` whose reply matches `want`, read 1000 at a time (each command on its key's node). */
async function pick<T, R>(items: T[], read: (item: T) => Promise<R>, want: (reply: R) => boolean): Promise<number[]> {
  const replies = await inChunks(items, read);
  return replies.flatMap((v, i) => (want(v) ? [i] : []));
}
