/**
 * lease-8.lua and settle-leased-batch.lua called directly on a private redis-server (no Ledger, no batcher), for
 * the ledger-level tests of credit leases: one wallet of 10_000 µUSDC on one shard, key 1 without a budget, key 2
 * with a budget of 1_000, key 3 revoked, and readers of everything the two scripts may touch.
 */
import { afterAll, beforeAll, beforeEach } from "bun:test";
import { Redis } from "ioredis";
import { keyStateFields } from "../../src/ledger/apiKeyState.ts";
import { leasedSettleArgs, leaseTake } from "../../src/ledger/batchArgs.ts";
import { RedisNames } from "../../src/ledger/names.ts";
import { LedgerScripts } from "../../src/ledger/scripts.ts";
import { privateRedis } from "./services.ts";

/** What one lease-8 call asks (defaults: key 1, share 1000, nothing else; a 60 s window, 15 s into it). */
export interface LeaseCall {
  key?: number;
  target?: number | string;
  floor?: number | string;
  share?: number | string;
  least?: number | string;
  slots?: number | string;
  back?: number | string;
  limit?: number | string;
  window?: number | string;
  elapsed?: number | string;
  ttlMs?: number | string;
  markerTtlS?: number | string;
  epoch?: string;
  /** ARGV[3] as sent, when a test wants it malformed. */
  owner?: string;
}

/** One settle-leased item: key, charge id, charge, lease id, what the request held of it, and its provider cost. */
export type LeasedItem = [key: number, chargeId: string, charge: number | string, leaseId: string, held: number | string, cost?: number];

/** The fixture: wallet, keys and the names of every key the scripts touch, set up afresh before each test. */
export function leaseScriptsOnRedis() {
  const names = new RedisNames(4);
  const wallet = `0x${"cd".repeat(19)}0001`;
  const shard = names.shardOf(wallet);
  const W = names.wallet(shard, wallet);
  const keyName = (k: number) => names.apiKey(shard, k);
  const WINDOW = 7;
  const marker = (id: string) => names.holdMarker(shard, id);
  const rateCur = names.rate(shard, wallet, WINDOW);
  const ratePrev = names.rate(shard, wallet, WINDOW - 1);
  const t: { redis: Redis; scripts: LedgerScripts; server: Awaited<ReturnType<typeof privateRedis>> } = {} as never;

  beforeAll(async () => {
    t.server = await privateRedis();
    t.redis = new Redis(t.server.socket);
    t.scripts = await LedgerScripts.connect(t.server.socket);
  });
  afterAll(async () => {
    t.redis?.disconnect();
    t.scripts?.close();
    await t.server?.stop();
  });
  beforeEach(async () => {
    await t.redis.flushall();
    await t.redis.set(names.fence(shard), "1");
    await t.redis.hset(W, { balance: 10_000, locked: 0 });
    await t.redis.hset(keyName(1), keyStateFields({ revoked: false, budget: null }));
    await t.redis.hset(keyName(2), keyStateFields({ revoked: false, budget: 1_000 }));
    await t.redis.hset(keyName(3), keyStateFields({ revoked: true, budget: null }));
  });

  function lease(id: string, c: LeaseCall = {}) {
    const key = c.key ?? 1;
    const keys = [W, keyName(key), names.holds(shard), marker(id), rateCur, ratePrev, names.outbox(shard), names.fence(shard)];
    return t.scripts.lease(keys, [
      c.epoch ?? "1",
      id,
      c.owner ?? `${wallet}|${key}`,
      c.target ?? 0,
      c.floor ?? 0,
      c.share ?? 1000,
      c.least ?? 0,
      c.slots ?? 0,
      c.back ?? 0,
      c.limit ?? 100,
      c.window ?? 60_000,
      c.elapsed ?? 15_000,
      c.ttlMs ?? 10_000,
      c.markerTtlS ?? 604_800,
    ]);
  }

  /**
   * One settle-leased-batch call, its reply per item as `{1, covered}` | `{0, state}` (a batch the script answered
   * {2}, every item charged with its lease giving up leaseTake, is spelled out per item so; `fast` says it was).
   * Charged items use 100 prompt and 20 completion tokens of model "m/x".
   */
  async function settleLeased(items: LeasedItem[], epoch = "1", o: { fast?: (fast: boolean) => void } = {}) {
    const list = items.map(([k, holdId, charge, lease, held, cost = 10]) => ({
      shard,
      walletName: W,
      apiKeyName: keyName(k),
      wallet,
      keyId: k,
      holdId,
      lease,
      held: Number(held),
      charge: Number(charge),
      promptTokens: 100,
      completionTokens: 20,
      costMicro: cost,
      model: "m/x",
    }));
    const { keys, argv } = leasedSettleArgs(names, new Map(list.length ? [[shard, list]] : []), [epoch], 604_800);
    const r = await t.scripts.settleLeasedBatch(keys, argv);
    o.fast?.(r[0] === 2);
    return r[0] === 2 ? [1, ...list.map((it) => [1, leaseTake(it)])] : r;
  }

  /** The sweeper on one lease: its expiry moved into the past, then release-6 'expire' as Ledger.sweepExpired calls it. */
  async function sweep(id: string, key = 1) {
    await t.redis.zadd(names.holds(shard), "XX", 1, id);
    const keys = [W, keyName(key), names.holds(shard), marker(id), names.outbox(shard), names.fence(shard)];
    return t.scripts.release(keys, "1", id, "expire", 604_800);
  }

  /** Everything the scripts write: wallet, keys, holds (with expiry), markers, outbox events (without `at`), rate counters. */
  async function state(ids: string[] = []) {
    const r = t.redis;
    const holds = await r.zrange(names.holds(shard), "0", "-1", "WITHSCORES");
    const entries = await r.xrange(names.outbox(shard), "-", "+");
    const events = entries.flatMap(([, f]) => JSON.parse(`[${f[1]!}]`) as Record<string, unknown>[]);
    for (const e of events)
      if (typeof e.at !== "number" || e.at < 1.6e12) throw new Error(`event without a Redis-clock at: ${JSON.stringify(e)}`);
    return {
      w: await r.hgetall(W),
      k1: await r.hgetall(keyName(1)),
      k2: await r.hgetall(keyName(2)),
      k3: await r.hgetall(keyName(3)),
      holds: Object.fromEntries(Array.from({ length: holds.length / 2 }, (_, i) => [holds[2 * i]!, Number(holds[2 * i + 1])])),
      markers: Object.fromEntries(await Promise.all(ids.map(async (id) => [id, await r.get(marker(id))] as const))),
      events: events.map(({ at: _at, ...e }) => e),
      entries: entries.length,
      rate: [await r.get(rateCur), await r.get(ratePrev)],
    };
  }

  /** Redis's clock, ms (lease expiries are on it). */
  async function redisNow(): Promise<number> {
    const [s, us] = await t.redis.time();
    return Number(s) * 1000 + Math.floor(Number(us) / 1000);
  }

  return { t, names, wallet, shard, W, keyName, marker, rateCur, ratePrev, lease, settleLeased, sweep, state, redisNow };
}
