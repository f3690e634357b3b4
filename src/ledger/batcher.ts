import type { LedgerFence } from "./fence.ts";
import type { RedisNames } from "./names.ts";
import type { BatchReply, LedgerScripts, ReserveItemReply, SettleItemReply } from "./scripts.ts";
import { leasedSettleArgs, leaseTake, type ReserveItem, reserveArgs, type SettleItem, settleArgs } from "./batchArgs.ts";

/** Items per script call at most: a call's Lua time stays well under a millisecond. */
const MAX_BATCH = 64;

interface Waiting<I, R> {
  item: I;
  resolve(r: R): void;
  reject(e: unknown): void;
  /** Told once the item's call is on the connection (or could not be made). */
  sent?: () => void;
}

/**
 * Natural batching per shard: an item goes out at once when no call of its kind is in flight for its shard
 * (concurrency 1 never waits), else it waits for the in-flight call's answer and goes with everything queued
 * meanwhile as the next call. Redis (and the client) then pay one script call per batch instead of one per item.
 * `call` must put its command on the connection synchronously: `flush` relies on it to keep commands in order.
 */
export class ShardBatcher<I, R> {
  private readonly queues = new Map<string, Waiting<I, R>[]>();
  private readonly inFlight = new Map<string, number>();
  private readonly riders = new Map<string, (() => void)[]>();

  constructor(
    private readonly call: (shard: string, items: I[]) => Promise<R[]>,
    private readonly cap = MAX_BATCH,
  ) {}

  /**
   * The item's own reply; rejects when its call failed (every item of that call fails alike). `sent` is called
   * once the item's call is on the connection: at once, or when the call in flight for the shard has answered.
   */
  submit(shard: string, item: I, sent?: () => void): Promise<R> {
    return new Promise<R>((resolve, reject) => this.submitTo(shard, item, resolve, reject, sent));
  }

  /** `submit` with the item's reply (or its call's failure) told to callbacks: no promise per item (a settle's). */
  submitTo(shard: string, item: I, resolve: (r: R) => void, reject: (e: unknown) => void, sent?: () => void): void {
    let q = this.queues.get(shard);
    if (!q) this.queues.set(shard, (q = []));
    q.push({ item, resolve, reject, sent });
    if (!this.inFlight.get(shard) || q.length >= this.cap) this.send(shard);
  }

  /**
   * Runs `put` (commands for the shard's connection that need no reply in order with the batch) with the shard's
   * next call, so they leave in the same write: now when no item waits (a call just went, or none is needed), else
   * right after the waiting items are put on the connection. Saves a write and a read of their own.
   */
  ride(shard: string, put: () => void): void {
    if (!this.queues.get(shard)?.length) return put();
    let r = this.riders.get(shard);
    if (!r) this.riders.set(shard, (r = []));
    r.push(put);
  }

  /** Whether items of `shard` wait for the call in flight (the next call would carry what rides). */
  waiting(shard: string): boolean {
    return (this.queues.get(shard)?.length ?? 0) > 0;
  }

  /**
   * Sends what waits for `shard` now, even while a call is in flight: whatever is sent for the shard after this
   * (a balance read, a release of a hold whose reserve is queued) runs in Redis after these items.
   */
  flush(shard: string): void {
    while (this.queues.get(shard)?.length) this.send(shard);
  }

  private send(shard: string): void {
    const q = this.queues.get(shard);
    if (!q?.length) return;
    const batch = q.splice(0, this.cap);
    this.inFlight.set(shard, (this.inFlight.get(shard) ?? 0) + 1);
    let reply: Promise<R[]>;
    try {
      reply = this.call(
        shard,
        batch.map((w) => w.item),
      );
    } catch (e) {
      reply = Promise.reject(e);
    }
    // Bun's Redis client queues a command and writes it once the microtask queue has drained (auto-pipelining):
    // `sent` lets an answer leave, so it waits for the next macrotask, when the call's bytes are in the kernel's
    // socket buffer and a kill -9 of this process no longer loses them (test/ledger.kill.error). One per call.
    if (batch.some((w) => w.sent)) setImmediate(() => batch.forEach((w) => w.sent?.()));
    const riders = this.riders.get(shard);
    if (riders) {
      this.riders.delete(shard);
      for (const put of riders) put();
    }
    reply
      .then((rs) => {
        if (rs.length !== batch.length) throw new Error(`batch of ${batch.length} answered with ${rs.length} replies`);
        batch.forEach((w, i) => w.resolve(rs[i]!));
      })
      .catch((e: unknown) => batch.forEach((w) => w.reject(e)))
      .finally(() => {
        const left = this.inFlight.get(shard)! - 1;
        this.inFlight.set(shard, left);
        if (left === 0) this.send(shard);
      });
  }
}

export type { ReserveItem, SettleItem } from "./batchArgs.ts";

export interface BatchLimits {
  rateLimitRequests: number;
  rateLimitWindowMs: number;
  holdTtlMs: number;
  resolutionTtlS: number;
}

/** The queue of every shard's reserves and settles on a single Redis, where one script call may span shards. */
const ALL_SHARDS = "*";

/**
 * The chat path's two ledger calls, batched (reserve-batch.lua, settle-batch.lua; settle-leased-batch.lua for
 * requests a credit lease admitted) and fenced per batch. On a single Redis (a router that takes keys of several
 * slots in one command) every shard's reserves wait in one queue and go as one call spanning their shards, so a
 * load spread over many wallets batches as well as one wallet's; on a Redis Cluster each shard has its queue and
 * its calls (a script runs where its slot lives). Leased settles batch the same way.
 */
export class LedgerBatches {
  readonly reserves: ShardBatcher<ReserveItem, ReserveItemReply>;
  readonly settles: ShardBatcher<SettleItem, SettleItemReply>;
  readonly leasedSettles: ShardBatcher<SettleItem, SettleItemReply>;
  private readonly spanShards: boolean;

  constructor(scripts: LedgerScripts, fence: LedgerFence, names: RedisNames, limits: BatchLimits) {
    this.spanShards = scripts.client.multiSlot;
    this.reserves = fencedBatcher(fence, (groups, epochs) => {
      const { keys, argv } = reserveArgs(names, groups, epochs, limits, Date.now());
      return scripts.reserveBatch(keys, argv);
    });
    this.settles = fencedBatcher(
      fence,
      (groups, epochs) => {
        const { keys, argv } = settleArgs(names, groups, epochs, limits.resolutionTtlS);
        return scripts.settleBatch(keys, argv);
      },
      (): SettleItemReply => [1],
    );
    this.leasedSettles = fencedBatcher(
      fence,
      (groups, epochs) => {
        const { keys, argv } = leasedSettleArgs(names, groups, epochs, limits.resolutionTtlS);
        return scripts.settleLeasedBatch(keys, argv);
      },
      // Its lease gave up leaseTake of each.
      (it): SettleItemReply => [1, leaseTake(it)],
    );
  }

  /** The queue of `shard`'s reserves and settles: its own on a Redis Cluster, every shard's on a single Redis. */
  queue(shard: string): string {
    return this.spanShards ? ALL_SHARDS : shard;
  }

  /** Sends the shard's queued reserves and settles now: a read or another ledger call of the shard follows them. */
  flush(shard: string): void {
    this.reserves.flush(this.queue(shard));
    this.settles.flush(this.queue(shard));
    this.leasedSettles.flush(this.queue(shard));
  }
}

/**
 * A batcher whose call sends its items grouped by shard (`script`, under the shards' fence: a FENCED reply is retried
 * once the epoch is adopted) and hands the replies back in item order; `allCharged` is each item's reply when the
 * script answers {2} (a settle whose every item charged).
 */
function fencedBatcher<I extends { shard: string }, R>(
  fence: LedgerFence,
  script: (groups: Map<string, I[]>, epochs: string[]) => Promise<BatchReply<R> | [2]>,
  allCharged?: (it: I) => R,
): ShardBatcher<I, R> {
  return new ShardBatcher((_queue, list) => {
    const groups = byShard(list);
    return fence
      .runMany([...groups.keys()], (epochs) => script(groups, epochs))
      .then((r) => (r[0] === 2 ? list.map(allCharged!) : inItemOrder(list, groups, perItem(r as BatchReply<R>))));
  });
}

/** A batch's items by shard, each shard's in their order (the script's groups, first seen first). */
function byShard<T extends { shard: string }>(list: T[]): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const it of list) {
    const g = groups.get(it.shard);
    if (g) g.push(it);
    else groups.set(it.shard, [it]);
  }
  return groups;
}

/** The replies of a call whose items went grouped by shard, back in the order of `list`. */
function inItemOrder<T, R>(list: T[], groups: Map<string, T[]>, replies: R[]): R[] {
  if (groups.size === 1) return replies;
  const at = new Map<T, R>();
  let i = 0;
  for (const items of groups.values()) for (const it of items) at.set(it, replies[i++]!);
  return list.map((it) => at.get(it)!);
}

/** The per-item replies of a batch that passed the fence (fence.run retried any FENCED reply). */
function perItem<T>(r: BatchReply<T>): T[] {
  return r.slice(1) as T[];
}
