import type { Ledger } from "../ledger/ledger.ts";
import { log } from "../log.ts";
import { Credits, type CreditInput } from "../store/credits.ts";
import type { Sql } from "../store/db.ts";
import { eventJson, insertLedgerEvents } from "../store/flusher.ts";
import { RebuildLock, RebuildLockLost } from "./lock.ts";
import { restoreRevocations } from "./reconcile.ts";
import { recordShardCount } from "./redisChecks.ts";
import { liveHolds, readSnapshot } from "./snapshot.ts";
import { writeLedger } from "./writeLedger.ts";

/** Test seams: awaited between the rebuild's steps, so a test can race writers against each one. */
export interface RebuildHooks {
  /** Every shard's fence is closed; nothing has been read yet. */
  fenced?(): Promise<void>;
  /** The Postgres snapshot is taken; nothing has been written yet. */
  snapshotTaken?(): Promise<void>;
  /** Every shard is written; no fence is open yet. */
  written?(): Promise<void>;
}

export interface RebuildOptions {
  lockTtlMs?: number;
  hooks?: RebuildHooks;
}

export type RebuildCounts = { epoch: string; wallets: number; credits: number; keys: number; holds: number };

/**
 * Makes sure Redis holds the ledger before the gateway serves, and again whenever a script finds a shard's fence
 * gone (Redis lost its data) or left closed by a dead rebuilder. A ledger that is ready with every fence open is
 * left alone; otherwise one process rebuilds (`rebuildLedger`'s steps) and the others wait for it.
 */
export async function ensureLedger(ledger: Ledger, sql: Sql, opts: RebuildOptions = {}): Promise<"ready" | "rebuilt"> {
  for (let logged = false; ; logged = true) {
    if (await ledgerOpen(ledger)) return "ready";
    const lock = await RebuildLock.tryAcquire(ledger, opts.lockTtlMs);
    if (lock) {
      try {
        if (await ledgerOpen(ledger)) return "ready";
        log.info("ledger built from Postgres", await rebuildUnder(lock, ledger, sql, opts.hooks));
        return "rebuilt";
      } finally {
        await lock.release();
      }
    }
    if (!logged) log.info("waiting for another process to rebuild the ledger");
    await Bun.sleep(100);
  }
}

/**
 * Rebuilds the ledger from Postgres now, fenced: the one entry point for a rebuild of a live Redis (`admin audit
 * --fix`). Takes the rebuild lock (waiting for another rebuild to finish), closes every shard's fence so no process
 * sharing this Redis changes a balance meanwhile, moves what only Redis knows (outbox charges, deferred credits)
 * into Postgres, reads one consistent snapshot, writes balances, key state and counters, credit ids and locks
 * (Σ live holds, which survive), then opens the fences under a new epoch. Writers refused meanwhile retry then.
 */
export async function rebuildLedger(ledger: Ledger, sql: Sql, opts: RebuildOptions = {}): Promise<RebuildCounts> {
  const lock = await RebuildLock.acquire(ledger, opts.lockTtlMs);
  try {
    const counts = await rebuildUnder(lock, ledger, sql, opts.hooks);
    log.info("ledger rebuilt from Postgres", counts);
    return counts;
  } finally {
    await lock.release();
  }
}

/** Ready, and every shard's fence open (a bare epoch). */
async function ledgerOpen(ledger: Ledger): Promise<boolean> {
  const k = ledger.names;
  const [ready, ...fences] = await Promise.all([ledger.redis.exists(k.ready), ...k.allShards().map((s) => ledger.redis.get(k.fence(s)))]);
  return ready === 1 && fences.every((f) => typeof f === "string" && /^\d+$/.test(f));
}

async function rebuildUnder(lock: RebuildLock, ledger: Ledger, sql: Sql, hooks: RebuildHooks = {}): Promise<RebuildCounts> {
  const { redis, names: k } = ledger;
  const shards = k.allShards();
  await recordShardCount(redis, k); // a Redis that lost its data lost this record too
  // Epochs only grow, also when the counter was lost with its node while other shards' fences survived (a cluster
  // master that came back empty): a fence still showing a later epoch moves the counter past it.
  const survivors = await Promise.all(shards.map((s) => redis.get(k.fence(s))));
  const highest = Math.max(0, ...survivors.map((f) => Number(/^(?:R:)?(\d+)(?::\d+)?$/.exec(f ?? "")?.[1] ?? 0)));
  let next = await redis.incr(k.epoch);
  if (next <= highest) next = await redis.incrby(k.epoch, highest + 1 - next);
  const epoch = String(next);
  const closed = `R:${epoch}`;
  lock.assertHeld();
  // Closed before anything is read: a script running after this refuses, one that ran before is in what follows.
  await Promise.all(shards.map((s) => redis.set(k.fence(s), closed)));
  await hooks.fenced?.();

  await drainOutboxes(ledger, sql);
  await recordDeferredCredits(ledger, sql);
  const snap = await readSnapshot(sql);
  await hooks.snapshotTaken?.();
  const held = await liveHolds(ledger);
  const written = await writeLedger(ledger, lock, closed, snap, held);
  // Exactly the credits of the snapshot are applied now; one committed since is applied by its own credit-3 call.
  const unapplied = snap.credits.filter((c) => !c.applied).map((c) => c.id);
  for (let i = 0; i < unapplied.length; i += 10_000) {
    await sql`UPDATE credits SET applied_at = now() WHERE applied_at IS NULL AND id = ANY(${sql.array(unapplied.slice(i, i + 10_000))}::bigint[])`;
  }
  // A key revoked after the snapshot (its Redis write then overwritten above) stays revoked.
  await restoreRevocations(ledger, sql);
  // Kept when present: SIWE refuses messages older than the last loss of Redis's replay guard (see siwe.ts).
  await redis.set(k.ready, new Date().toISOString(), "NX");
  await hooks.written?.();

  lock.assertHeld();
  // A fence that is no longer what this rebuild's last batch left means another rebuild took over (its result
  // stands) or a failover lost batches (a replica promoted since lacks them): either way the shard stays closed.
  for (const s of shards) {
    const last = written.get(s) ?? closed;
    if (!(await ledger.scripts.compareAndSet(k.fence(s), last, epoch))) {
      throw new RebuildLockLost(
        `shard ${s}'s fence is no longer this rebuild's "${last}": another process rebuilt the ledger, or a failover lost this rebuild's writes`,
      );
    }
  }
  ledger.fence.adoptAll(epoch);
  return { epoch, wallets: snap.wallets.length, credits: snap.credits.length, keys: snap.apiKeys.length, holds: held.count };
}

/** Charges still in the outbox go to Postgres first (idempotent by event id; the flusher acks them later). */
async function drainOutboxes(ledger: Ledger, sql: Sql): Promise<void> {
  for (const s of ledger.names.allShards()) {
    for (let from = "-"; ;) {
      const entries = await ledger.redis.xrange(ledger.names.outbox(s), from, "+", "COUNT", 500);
      if (entries.length === 0) break;
      await insertLedgerEvents(
        sql,
        entries.map(([, fields]) => eventJson(fields)).filter((e): e is string => e !== null),
      );
      from = `(${entries[entries.length - 1]![0]}`;
    }
  }
}

/** Credits applied to Redis while Postgres was down (the credit outbox) are recorded before the snapshot. */
async function recordDeferredCredits(ledger: Ledger, sql: Sql): Promise<void> {
  const credits = new Credits(sql, ledger);
  for (const [eventId, json] of Object.entries(await ledger.redis.hgetall(ledger.names.creditOutbox))) {
    await credits.record(sql, JSON.parse(json) as CreditInput);
    await ledger.redis.hdel(ledger.names.creditOutbox, eventId);
  }
}
