import { rebuiltKeyFields } from "../ledger/apiKeyState.ts";
import type { Ledger } from "../ledger/ledger.ts";
import { log } from "../log.ts";
import { inChunks, scanKeys } from "../redis/connect.ts";
import { Credits, type CreditInput } from "../store/credits.ts";
import type { Sql } from "../store/db.ts";
import { eventJson, insertLedgerEvents } from "../store/flusher.ts";
import { restoreRevocations } from "./reconcile.ts";
import { FencedShardWriter } from "./batch.ts";
import { RebuildLock, RebuildLockLost } from "./lock.ts";
import { recordShardCount } from "./redisChecks.ts";

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

type Snapshot = Awaited<ReturnType<typeof readSnapshot>>;

/** Everything the ledger is built from, read in one REPEATABLE READ read-only transaction: one moment of Postgres. */
function readSnapshot(sql: Sql) {
  return sql.begin("isolation level repeatable read read only", async (tx) => {
    const wallets = await tx<{ wallet: string; balance: number }[]>`
      SELECT wallet, SUM(amount)::bigint AS balance FROM (
        SELECT wallet, amount_usdc AS amount FROM credits
        UNION ALL SELECT wallet, -amount_usdc FROM ledger_events WHERE type = 'charge'
      ) m GROUP BY wallet`;
    const credits = await tx<{ id: number; wallet: string; event_id: string; amount_usdc: number; applied: boolean }[]>`
      SELECT id, wallet, event_id, amount_usdc, applied_at IS NOT NULL AS applied FROM credits`;
    const apiKeys = await tx<
      {
        id: number;
        wallet: string;
        key_hash: string;
        budget_usdc: number | null;
        revoked: boolean;
        requests: number;
        pt: number;
        ct: number;
        spent: number;
        revenue: number;
      }[]
    >`
      SELECT k.id, k.wallet, k.key_hash, k.budget_usdc, k.revoked_at IS NOT NULL AS revoked,
             COUNT(e.event_id)::bigint AS requests,
             COALESCE(SUM(e.prompt_tokens), 0)::bigint AS pt, COALESCE(SUM(e.completion_tokens), 0)::bigint AS ct,
             COALESCE(SUM(e.amount_usdc), 0)::bigint AS spent, COALESCE(SUM(e.amount_usdc - e.cost_usd_micro), 0)::bigint AS revenue
      FROM api_keys k LEFT JOIN ledger_events e ON e.api_key_id = k.id AND e.type = 'charge'
      GROUP BY k.id`;
    return { wallets: [...wallets], credits: [...credits], apiKeys: [...apiKeys] };
  });
}

/** Σ live holds per wallet hash and per key hash (Redis key names): holds survive a rebuild, so their locks do. */
async function liveHolds(ledger: Ledger) {
  const k = ledger.names;
  const wallets = new Map<string, number>();
  const keys = new Map<string, number>();
  let count = 0;
  for (const s of k.allShards()) {
    const ids = await ledger.redis.zrange(k.holds(s), "0", "-1");
    for (let i = 0; i < ids.length; i += 500) {
      const markers = await ledger.redis.mget(ids.slice(i, i + 500).map((id) => k.holdMarker(s, id)));
      for (const m of markers) {
        const live = m && /^live\|(\d+)\|([^|]*)\|(.*)$/.exec(m);
        if (!live) continue;
        const [, amount, wallet, keyId] = live;
        const w = k.wallet(s, wallet!);
        const key = k.apiKey(s, keyId!);
        wallets.set(w, (wallets.get(w) ?? 0) + Number(amount));
        keys.set(key, (keys.get(key) ?? 0) + Number(amount));
        count++;
      }
    }
  }
  return { wallets, keys, count };
}

/**
 * Writes the snapshot shard by shard through fenced batches (rebuild-write-2.lua, on the shard's master), each
 * landing only while the shard's fence is still this rebuild's. Per shard the applied credit ids go first, then
 * balances and key state, and ids Postgres does not know are dropped last: a rebuild stopped between two batches
 * never leaves a balance that includes a credit the credited hash lacks (the reconciler would apply it again).
 * Returns each shard's fence as its last batch left it, the only one the shard is opened from.
 */
async function writeLedger(
  ledger: Ledger,
  lock: RebuildLock,
  closed: string,
  snap: Snapshot,
  held: Awaited<ReturnType<typeof liveHolds>>,
): Promise<Map<string, string>> {
  const { redis, names: k } = ledger;
  const shards = new Map(
    k
      .allShards()
      .map((s) => [s, { credits: new Map<string, number>(), wallets: new Map<string, number>(), keys: [] as Snapshot["apiKeys"] }]),
  );
  const of = (wallet: string) => shards.get(k.shardOf(wallet))!;
  const written = new Map<string, string>();
  for (const c of snap.credits) of(c.wallet).credits.set(c.event_id, c.amount_usdc);
  for (const w of snap.wallets) of(w.wallet).wallets.set(k.wallet(k.shardOf(w.wallet), w.wallet), w.balance);
  for (const key of snap.apiKeys) of(key.wallet).keys.push(key);
  // A wallet hash Postgres knows nothing of holds no money (a tampered or stray write); its live holds stay locked.
  const others = new Set(held.wallets.keys());
  for await (const names of scanKeys(redis, k.walletPattern)) for (const n of names) if (k.isWallet(n)) others.add(n);
  for (const name of others) {
    const shard = shards.get(k.parseRecord(name)?.shard ?? "");
    if (shard && !shard.wallets.has(name)) shard.wallets.set(name, 0);
  }

  for (const [s, plan] of shards) {
    const w = new FencedShardWriter(ledger, lock, s, closed);
    await w.hset(k.credited(s), Object.fromEntries(plan.credits));
    for (const [name, balance] of plan.wallets) await w.hset(name, { balance, locked: held.wallets.get(name) ?? 0 });
    for (const key of plan.keys) {
      const name = ledger.principal(key.id, key.wallet).apiKeyName;
      await w.hset(
        name,
        rebuiltKeyFields(
          { revoked: key.revoked, budget: key.budget_usdc },
          {
            spent: key.spent,
            locked: held.keys.get(name) ?? 0,
            requests: key.requests,
            prompt_tokens: key.pt,
            completion_tokens: key.ct,
            revenue: key.revenue,
          },
        ),
      );
    }
    // The credited hash is exactly the snapshot's credits (a credit applied before the fence closed is in it).
    await w.hdel(
      k.credited(s),
      (await redis.hkeys(k.credited(s))).filter((id) => !plan.credits.has(id)),
    );
    await w.flush();
    written.set(s, w.fence);
  }
  // Key hash -> "keyId|wallet" never changes, so a stale rebuild rewriting it is harmless: no fence needed. One
  // command each (on a cluster a pipeline may not span nodes), a thousand at a time.
  await inChunks(snap.apiKeys, (key) => ledger.apiKeys.writeMapping(ledger.principal(key.id, key.wallet), key.key_hash));
  return written;
}
