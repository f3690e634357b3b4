/**
 * `admin audit`: proves that Redis (the hot ledger) and Postgres (the system of record) agree, wallet by wallet
 * and key by key, while the gateway serves.
 *
 * How it reads a consistent view under load:
 * 1. It lists every wallet and key name (Redis SCAN, then Postgres: money and keys reach Postgres first, so
 *    nothing Redis shows is missing from the list).
 * 2. Per shard, one Lua script (audit-3.lua; one slot, so it runs on a Redis Cluster too) reads the shard's
 *    wallets, keys and live holds at one instant, with Redis's clock, and notes how many credits were applied and
 *    the outbox's last id. Holds in flight are part of that instant (locked = Σ live holds is exact). The outbox
 *    and the applied credits, which grow large (millions of entries after a long Postgres outage; credits are never
 *    removed), are read after it in pages, so no single call holds Redis up for the gateways: the outbox up to
 *    that last id (append-only; what the flusher deletes meanwhile, Postgres already has), the credits by HSCAN,
 *    kept only when the scan found exactly as many as the instant had (credits are only added), else the small
 *    part is read again after the scan (`readShard`). Charges not yet flushed are part of the instant that way.
 * 3. Then Redis's credit outbox (credits applied while Postgres was down), then Postgres in one REPEATABLE READ
 *    snapshot. Postgres can only be ahead of the Redis read: a charge flushed meanwhile is de-duplicated by its
 *    event id against the outbox read, a charge settled after a shard's read is told apart by its Redis-clock
 *    stamp, a credit recorded meanwhile is not yet in the shard's applied credits. A credit, key or revocation
 *    Postgres shows but the shard read did not is asked of Redis again: if Redis has it now, it landed after.
 * 4. What remains can only be a write caught between its Postgres and its Redis half at the very moment of the
 *    audit, or a clock step back, so a difference counts only when a second, fresh audit finds it again.
 */
import type { RedisNames } from "../ledger/names.ts";
import type { Ledger } from "../ledger/ledger.ts";
import type { LedgerScripts } from "../ledger/scripts.ts";
import { inChunks, type RedisCommands } from "../redis/connect.ts";
import { compareBooks, lateCandidates } from "./compare.ts";
import type { AuditPass, Difference } from "./types.ts";
import { readPostgresBooks } from "./postgres.ts";
import { readCreditOutbox, writtenSinceRead } from "./inFlight.ts";
import { listLedgerNames } from "./ledgerNames.ts";
import { readShard } from "./redis.ts";
import { formatAudit } from "./report.ts";
import type { Credits } from "../store/credits.ts";
import type { Sql } from "../store/db.ts";
import type { Flusher } from "../store/flusher.ts";
import { rebuildLedger } from "../rebuild/rebuild.ts";

/** What the audit reads through: the gateway's own connections. */
export interface AuditDeps {
  redis: RedisCommands;
  scripts: LedgerScripts;
  sql: Sql;
  names: RedisNames;
  /** Entries per page when reading a shard's outbox and credited hash (AUDIT_PAGE; tests set it small). */
  pageSize?: number;
}

/** What `--fix` works through besides: the ledger (its fenced rebuild), and what moves money into Postgres first. */
export interface RepairDeps {
  redis: RedisCommands;
  sql: Sql;
  ledger: Ledger;
  credits: Pick<Credits, "reapplyPending">;
  flusher: Pick<Flusher, "drain">;
}

/** The outcome of an audit: clean when there is no difference. */
export interface AuditResult extends AuditPass {
  clean: boolean;
}

/** One pass, unconfirmed: under chat traffic alone it is already exact (a test holds it to that). */
export async function auditOnce(d: AuditDeps): Promise<AuditPass> {
  const names = await listLedgerNames(d.redis, d.sql, d.names);
  const shards = [];
  for (const [shard, n] of names.byShard)
    shards.push(await readShard(d.scripts, d.names, shard, [...n.wallets], [...n.keyIds], d.pageSize));
  const creditOutbox = await readCreditOutbox(d.redis, d.names);
  const outboxIds = shards.flatMap((s) => s.outboxCharges.map((e) => e.eventId));
  const pg = await readPostgresBooks(d.sql, Math.min(...shards.map((s) => s.nowMs)), outboxIds);
  const late = await writtenSinceRead(d.redis, d.names, lateCandidates(d.names, names, shards, pg));
  return compareBooks(d.names, names, shards, creditOutbox, pg, late);
}

const identity = (x: Difference) => `${x.subject}\u0000${x.field}`;

/** Audits the books; a difference is reported only when a second audit confirms it (see the top of this file). */
export async function auditLedger(d: AuditDeps): Promise<AuditResult> {
  const first = await auditOnce(d);
  if (first.differences.length === 0) return { ...first, clean: true };
  const seen = new Set(first.differences.map(identity));
  const second = await auditOnce(d);
  const differences = second.differences.filter((x) => seen.has(identity(x)));
  return { ...second, differences, clean: differences.length === 0 };
}

/**
 * Rebuilds the Redis ledger from Postgres through the fenced rebuild: every process sharing the Redis holds its
 * balance changes meanwhile, live holds are kept (locked is recomputed from them), and the outboxes are drained.
 */
export async function rebuildLedgerNow(s: Pick<RepairDeps, "ledger" | "sql">): Promise<void> {
  await rebuildLedger(s.ledger, s.sql);
}

/**
 * `--fix`: makes Redis what Postgres says. First everything on its way into Postgres gets there (credits from
 * Redis's credit outbox, charges from the outbox), or the rebuild, which reads only Postgres, would drop it.
 * Redis records Postgres does not know are removed (a rebuild writes only what Postgres has), then the rebuild.
 */
export async function repairFromPostgres(s: RepairDeps, found: AuditResult): Promise<void> {
  await s.credits.reapplyPending();
  await s.flusher.drain();
  const strays = found.differences.flatMap((x) => (x.stray ? [x.stray] : []));
  if (strays.length > 0) {
    await inChunks(strays, (x) => (x.field === undefined ? s.redis.del(x.key) : s.redis.hdel(x.key, x.field)));
  }
  await rebuildLedgerNow(s);
}

/** The command: audit, print, and with `fix` repair when needed and audit again. Output and whether it is clean. */
export async function runAudit(
  s: RepairDeps & { scripts: LedgerScripts },
  opts: { fix: boolean },
): Promise<{ output: string; clean: boolean }> {
  const deps = { redis: s.redis, scripts: s.scripts, sql: s.sql, names: s.ledger.names };
  const found = await auditLedger(deps);
  if (!opts.fix || found.clean) return { output: formatAudit(found), clean: found.clean };
  await repairFromPostgres(s, found);
  const after = await auditLedger(deps);
  return {
    output: [formatAudit(found), "", "--fix: rebuilt the Redis ledger from Postgres; audit again:", "", formatAudit(after)].join("\n"),
    clean: after.clean,
  };
}
