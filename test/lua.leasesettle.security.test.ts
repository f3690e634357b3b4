/**
 * settle-leased-batch.lua called directly on a private redis-server: charges of requests a credit lease admitted,
 * each moving at most what the request held from the lease's lock to the balance, with the wallet, the key's
 * counters, the lease's marker and the outbox asserted exactly (test/helpers/leaseScripts.ts: a wallet of 10_000).
 */
import { describe, expect, test } from "bun:test";
import { leasedSettleArgs } from "../src/ledger/batchArgs.ts";
import { Ledger } from "../src/ledger/ledger.ts";
import { leaseScriptsOnRedis } from "./helpers/leaseScripts.ts";

const r = leaseScriptsOnRedis();
const { lease, settleLeased, state, wallet, marker } = r;
const live = (amount: number, key = 1) => `live|${amount}|${wallet}|${key}`;
const charge = (hold: string, amount: number, key = 1, cost = 10) => ({
  type: "charge",
  hold,
  wallet,
  key,
  model: "m/x",
  amount,
  cost,
  pt: 100,
  ct: 20,
});

describe("settle-leased-batch on Redis", () => {
  test("covers min(charge, held, lease lock), items of one lease each seeing the ones before; a repeat is a no-op", async () => {
    expect(await lease("L", { target: 3_000 })).toEqual([1, 3_000, 7_000, 0, 0, 100]);
    const r1 = await settleLeased([
      [1, "a", 500, "L", 800], // all of it from the lease: 2_500 left
      [1, "b", 1_000, "L", 600], // only what it held: 400 more off the balance alone
      [1, "a", 7, "L", 7], // a again in the same batch
      [1, "c", 5_000, "L", 5_000], // the 1_900 the lease has left
      [1, "d", 5, "X", 5], // a lease Redis does not know
      [1, "e", 0, "L", 100], // nothing used: a request counted, nothing moved
    ]);
    expect(r1).toEqual([1, [1, 500], [1, 600], [0, "settled"], [1, 1_900], [0, "UNKNOWN_HOLD"], [1, 0]]);
    const s = await state(["L", "a", "b", "c", "d", "e"]);
    expect(s.w).toEqual({ balance: "3500", locked: "0" });
    expect(s.k1).toEqual({
      revoked: "0",
      budget: "",
      locked: "0",
      spent: "6500",
      requests: "4",
      prompt_tokens: "400",
      completion_tokens: "80",
      revenue: "6460",
    });
    // A lease whose lock reached 0 stays open, in the holds zset, until its owner closes it or it expires.
    expect(s.markers).toEqual({ L: live(0), a: "settled", b: "settled", c: "settled", d: null, e: "settled" });
    expect(Object.keys(s.holds)).toEqual(["L"]);
    expect(await r.t.redis.ttl(marker("a"))).toBeGreaterThan(600_000);
    expect(s.events).toEqual([charge("a", 500), charge("b", 1_000), charge("c", 5_000), charge("e", 0)]);
    expect(s.entries).toBe(1);
    // The same charges again, alone or in a batch: nothing changes, no event.
    expect(await settleLeased([[1, "b", 1_000, "L", 600]])).toEqual([1, [0, "settled"]]);
    expect(await settleLeased([[1, "c", 1, "L", 1], [1, "a", 1, "L", 1]])).toEqual([1, [0, "settled"], [0, "settled"]]); // prettier-ignore
    expect(await state(["L", "a", "b", "c", "d", "e"])).toEqual(s);
    // The lease grows again from what is available, as any renew.
    expect(await lease("L", { target: 1_000 })).toEqual([1, 1_000, 2_500, 0, 0, 100]);
  });

  test("two leases of two keys in one batch: each key's lock and counters, one wallet", async () => {
    expect(await lease("L1", { target: 2_000 })).toEqual([1, 2_000, 8_000, 0, 0, 100]);
    expect(await lease("L2", { key: 2, target: 5_000 })).toEqual([1, 1_000, 7_000, 0, 0, 100]);
    expect(
      await settleLeased([
        [2, "x", 300, "L2", 400, 500],
        [1, "y", 2_500, "L1", 2_500],
        [2, "z", 100, "L2", 100],
      ]),
    ).toEqual([1, [1, 300], [1, 2_000], [1, 100]]);
    const s = await state(["L1", "L2"]);
    expect(s.w).toEqual({ balance: "7100", locked: "600" });
    expect(s.k1).toMatchObject({ locked: "0", spent: "2500", requests: "1", revenue: "2490" });
    expect(s.k2).toMatchObject({ budget: "1000", locked: "600", spent: "400", requests: "2", revenue: "-110" });
    expect(s.markers).toEqual({ L1: live(0), L2: live(600, 2) });
    expect(s.events).toEqual([charge("x", 300, 2, 500), charge("y", 2_500), charge("z", 100, 2)]);
  });

  test("a lease the sweeper expired or its owner closed still charges, with nothing covered", async () => {
    expect(await lease("L", { target: 3_000 })).toEqual([1, 3_000, 7_000, 0, 0, 100]);
    expect(await lease("M", { target: 1_000 })).toEqual([1, 1_000, 6_000, 0, 0, 100]);
    expect(await r.sweep("L")).toEqual([1, 3_000]);
    expect(await lease("M", { target: 0 })).toEqual([1, 0, 10_000, 0, 1_000, 100]);
    expect(
      await settleLeased([
        [1, "a", 400, "L", 400],
        [1, "b", 100, "M", 100],
      ]),
    ).toEqual([1, [1, 0], [1, 0]]);
    const s = await state(["L", "M"]);
    expect(s.w).toEqual({ balance: "9500", locked: "0" });
    expect(s.k1).toMatchObject({ locked: "0", spent: "500", requests: "2" });
    expect(s.markers).toEqual({ L: "expired", M: "released" });
    expect(s.holds).toEqual({});
    expect(s.events).toEqual([
      { type: "expire", hold: "L", wallet, key: 1, amount: 3_000 },
      { type: "release", hold: "M", wallet, key: 1, amount: 1_000 },
      charge("a", 400),
      charge("b", 100),
    ]);
  });

  test("a lease its charges brought to 0 still expires by the sweeper, and the sweep goes on past it", async () => {
    expect(await lease("L", { target: 3_000 })).toEqual([1, 3_000, 7_000, 0, 0, 100]);
    expect(await lease("M", { target: 1_000 })).toEqual([1, 1_000, 6_000, 0, 0, 100]);
    let fast = false;
    expect(await settleLeased([[1, "a", 3_000, "L", 3_000]], "1", { fast: (f) => (fast = f) })).toEqual([1, [1, 3_000]]);
    expect(fast).toBe(true); // the lease held all of it: the gateway's sums applied as they are
    expect(await r.t.redis.get(marker("L"))).toBe(live(0));
    // Both past their expiry, L first: the sweeper must expire L (a lock of 0) and then M.
    await r.t.redis.zadd(r.names.holds(r.shard), "XX", 1, "L", 2, "M");
    const ledger = new Ledger(r.t.redis, r.t.scripts, r.names, { rateLimitRequests: 100, rateLimitWindowMs: 60_000, holdTtlMs: 60_000 });
    await ledger.fence.readAll();
    expect(await ledger.sweepExpired()).toBe(2);
    const s = await state(["L", "M"]);
    expect(s.w).toEqual({ balance: "7000", locked: "0" });
    expect(s.k1).toMatchObject({ locked: "0", spent: "3000" });
    expect(s.markers).toEqual({ L: "expired", M: "expired" });
    expect(s.holds).toEqual({});
    expect(s.events).toEqual([
      charge("a", 3_000),
      { type: "expire", hold: "L", wallet, key: 1, amount: 0 },
      { type: "expire", hold: "M", wallet, key: 1, amount: 1_000 },
    ]);
  });

  test("an unknown lease changes nothing, and its charge id stays unposted", async () => {
    const before = await state(["a"]);
    expect(await settleLeased([[1, "a", 400, "nope", 400]])).toEqual([1, [0, "UNKNOWN_HOLD"]]);
    expect(await state(["a"])).toEqual(before);
    expect(await lease("nope", { target: 500 })).toEqual([1, 500, 9_500, 0, 0, 100]);
    expect(await settleLeased([[1, "a", 400, "nope", 400]])).toEqual([1, [1, 400]]);
  });

  test("a fenced batch or bad arguments change nothing", async () => {
    await lease("L", { target: 3_000 });
    const before = await state(["L", "a", "b"]);
    expect(await settleLeased([[1, "a", 1, "L", 1]], "2")).toEqual([0, "FENCED", "1", 1]);
    for (const bad of [
      [[1, "", 1, "L", 1]],
      [[1, "a", -1, "L", 1]],
      [[1, "a", "1.5", "L", 1]],
      [[1, "a", 1, "L", "x"]],
      [[1, "a", 1, "L", 1, 1.5]],
      [
        [1, "a", 1, "L", 1],
        [1, "b", "9999999999999999", "L", 1],
      ],
      [],
    ] as Parameters<typeof settleLeased>[0][]) {
      // The numbers are checked as the arguments are built (batchArgs.ts), the shapes by the script.
      await expect(settleLeased(bad)).rejects.toThrow("bad arguments");
    }
    // Arguments of the wrong shape: the script refuses them.
    const item = { shard: r.shard, walletName: r.W, apiKeyName: r.keyName(1), wallet, keyId: 1, holdId: "a", lease: "L", held: 1 };
    const good = leasedSettleArgs(
      r.names,
      new Map([[r.shard, [{ ...item, charge: 1, promptTokens: 1, completionTokens: 1, costMicro: 1, model: "m" }]]]),
      ["1"],
      60,
    );
    const at = (i: number, v: string) => good.argv.map((a, j) => (j === i ? v : a));
    for (const argv of [
      at(1, "112"), // the item's lease 2 of 1
      at(1, "11"), // two bytes for one item
      at(good.argv.length - 1, '{"type":"release"'), // not a charge event
      at(good.argv.length - 2, "1.5"), // what the lease gives up
      at(good.argv.length - 3, ""), // no charge id
      at(8, "-1"), // the wallet's charges
      good.argv.slice(0, -1),
    ]) {
      await expect(r.t.scripts.settleLeasedBatch(good.keys, argv)).rejects.toThrow("settle-leased-batch: bad arguments");
    }
    expect(await state(["L", "a", "b"])).toEqual(before);
  });
});
