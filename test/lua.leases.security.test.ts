/**
 * lease-8.lua called directly on a private redis-server: how a credit lease opens, grows, shrinks, closes and
 * takes rate slots, with the wallet's balance and lock, the key's counters, the holds zset, the lease's marker and
 * the outbox asserted exactly after each call (test/helpers/leaseScripts.ts sets up the wallet of 10_000).
 */
import { describe, expect, test } from "bun:test";
import { Ledger } from "../src/ledger/ledger.ts";
import { leaseScriptsOnRedis } from "./helpers/leaseScripts.ts";

const r = leaseScriptsOnRedis();
const { lease, state, wallet, marker } = r;
const live = (amount: number, key = 1) => `live|${amount}|${wallet}|${key}`;
const release = (hold: string, amount: number, key = 1) => ({ type: "release", hold, wallet, key, amount });

describe("lease-8 on Redis", () => {
  test("opens with what it can lock up to its share, or not at all below `least`; expires a lifetime after each call", async () => {
    const t0 = await r.redisNow();
    expect(await lease("A", { target: 3_000, share: 500, least: 2_000 })).toEqual([1, 3_000, 7_000, 0, 0, 100]);
    // Half of the 7_000 left is 3_500.
    expect(await lease("B", { target: 9_000, share: 500 })).toEqual([1, 3_500, 3_500, 0, 0, 100]);
    // Half of 3_500 is less than `least`: nothing opens and no rate slot is taken, though 5 were asked.
    expect(await lease("C", { target: 3_000, share: 500, least: 2_000, slots: 5 })).toEqual([1, 0, 3_500, 0, 0, 100]);
    let s = await state(["A", "B", "C"]);
    expect(s.markers).toEqual({ A: live(3_000), B: live(3_500), C: null });
    expect(Object.keys(s.holds).sort()).toEqual(["A", "B"]);
    expect(s.rate).toEqual([null, null]);
    // Refused, the id is not resolved: it opens later when `least` fits.
    expect(await lease("C", { target: 3_000, share: 500, least: 1_750 })).toEqual([1, 1_750, 1_750, 0, 0, 100]);
    const t1 = await r.redisNow();
    s = await state(["C"]);
    expect(s.w).toEqual({ balance: "10000", locked: "8250" });
    expect(s.k1).toEqual({ revoked: "0", budget: "", locked: "8250" });
    expect(s.markers.C).toBe(live(1_750));
    for (const id of ["A", "B", "C"]) {
      expect(s.holds[id]).toBeGreaterThanOrEqual(t0 + 10_000);
      expect(s.holds[id]).toBeLessThanOrEqual(t1 + 10_000);
    }
    expect(s.events).toEqual([]);
  });

  test("grows up to the wallet's available credit and its share of it, never shrinks for the share", async () => {
    expect(await lease("A", { target: 6_000 })).toEqual([1, 6_000, 4_000, 0, 0, 100]);
    expect(await lease("B", { target: 6_000 })).toEqual([1, 4_000, 0, 0, 0, 100]);
    expect(await lease("B", { target: 6_000 })).toEqual([1, 4_000, 0, 0, 4_000, 100]);
    expect(await lease("A", { target: 2_000 })).toEqual([1, 2_000, 4_000, 0, 6_000, 100]);
    // Half of (4_000 available + its own 4_000) is what it locks: no growth (and a share never shrinks it).
    expect(await lease("B", { target: 6_000, share: 500 })).toEqual([1, 4_000, 4_000, 0, 4_000, 100]);
    expect(await lease("B", { target: 6_000, share: 400 })).toEqual([1, 4_000, 4_000, 0, 4_000, 100]);
    expect(await lease("B", { target: 6_000 })).toEqual([1, 6_000, 2_000, 0, 4_000, 100]);
    const s = await state(["A", "B"]);
    expect(s.w).toEqual({ balance: "10000", locked: "8000" });
    expect(s.k1.locked).toBe("8000");
    expect(s.markers).toEqual({ A: live(2_000), B: live(6_000) });
  });

  test("grows up to the key's budget left; a lowered budget shrinks it, down to its floor", async () => {
    await r.t.redis.hset(r.keyName(2), "spent", 300);
    expect(await lease("K", { key: 2, target: 5_000 })).toEqual([1, 700, 9_300, 0, 0, 100]);
    expect(await lease("K", { key: 2, target: 5_000 })).toEqual([1, 700, 9_300, 0, 700, 100]);
    await r.t.redis.hset(r.keyName(2), "budget", 500); // 500 − 300 spent − 700 locked: 500 over
    expect(await lease("K", { key: 2, target: 5_000, floor: 100 })).toEqual([1, 200, 9_800, 0, 700, 100]);
    await r.t.redis.hset(r.keyName(2), "budget", 0);
    expect(await lease("K", { key: 2, target: 5_000, floor: 150 })).toEqual([1, 150, 9_850, 0, 200, 100]);
    const s = await state(["K"]);
    expect(s.w).toEqual({ balance: "10000", locked: "150" });
    expect(s.k2).toEqual({ revoked: "0", budget: "0", spent: "300", locked: "150" });
    expect(s.markers.K).toBe(live(150, 2));
    expect(s.events).toEqual([]);
  });

  test("shrinks to the target but never below the floor; the floor is clamped to the lock and never grows it", async () => {
    expect(await lease("A", { target: 5_000 })).toEqual([1, 5_000, 5_000, 0, 0, 100]);
    expect(await lease("A", { target: 1_000, floor: 2_000 })).toEqual([1, 2_000, 8_000, 0, 5_000, 100]);
    expect(await lease("B", { target: 8_000 })).toEqual([1, 8_000, 0, 0, 0, 100]);
    // A floor above the lock (requests whose settles already ran) counts as the lock: not closed, not grown.
    expect(await lease("A", { target: 0, floor: 9_000 })).toEqual([1, 2_000, 0, 0, 2_000, 100]);
    await lease("B", { target: 0 });
    expect(await lease("A", { target: 0, floor: 9_000 })).toEqual([1, 2_000, 8_000, 0, 2_000, 100]);
    expect(await lease("A", { target: 500 })).toEqual([1, 500, 9_500, 0, 2_000, 100]);
    const s = await state(["A", "B"]);
    expect(s.w).toEqual({ balance: "10000", locked: "500" });
    expect(s.k1.locked).toBe("500");
    expect(s.markers).toEqual({ A: live(500), B: "released" });
    expect(s.events).toEqual([release("B", 8_000)]);
  });

  test("an overdrawn wallet shrinks it by what is missing, down to its floor; with no floor it closes", async () => {
    expect(await lease("A", { target: 5_000 })).toEqual([1, 5_000, 5_000, 0, 0, 100]);
    await r.t.redis.hset(r.W, "balance", 4_000); // a charge beyond its hold, elsewhere
    expect(await lease("A", { target: 5_000, floor: 1_000 })).toEqual([1, 4_000, 0, 0, 5_000, 100]);
    await r.t.redis.hset(r.W, "balance", 2_500);
    expect(await lease("A", { target: 5_000, floor: 3_000 })).toEqual([1, 3_000, -500, 0, 4_000, 100]);
    await r.t.redis.hset(r.W, "balance", 0);
    expect(await lease("A", { target: 5_000 })).toEqual([1, 0, 0, 0, 3_000, 100]);
    const s = await state(["A"]);
    expect(s.w).toEqual({ balance: "0", locked: "0" });
    expect(s.k1.locked).toBe("0");
    expect(s.markers.A).toBe("released");
    expect(s.holds).toEqual({});
    expect(s.events).toEqual([release("A", 3_000)]);
    expect(await lease("A", { target: 5_000 })).toEqual([0, "HOLD_RESOLVED"]);
  });

  test("a revoked or unknown key: no growth, no slots, UNAUTHORIZED; it still shrinks and closes as asked", async () => {
    expect(await lease("A", { target: 3_000, slots: 5 })).toEqual([1, 3_000, 7_000, 5, 0, 95]);
    await r.t.redis.hset(r.keyName(1), "revoked", "1");
    expect(await lease("A", { target: 6_000, slots: 5 })).toEqual([0, "UNAUTHORIZED", 3_000, 3_000]);
    expect((await state()).rate[0]).toBe("5");
    expect(await lease("A", { target: 1_000, slots: 5 })).toEqual([0, "UNAUTHORIZED", 1_000, 3_000]);
    expect(await lease("A", { target: 0, back: 5 })).toEqual([0, "UNAUTHORIZED", 0, 1_000]);
    expect(await lease("R", { key: 3, target: 3_000, slots: 5 })).toEqual([0, "UNAUTHORIZED", 0, 0]);
    expect(await lease("U", { key: 9, target: 3_000, slots: 5 })).toEqual([0, "UNAUTHORIZED", 0, 0]);
    const s = await state(["A", "R", "U"]);
    expect(s.w).toEqual({ balance: "10000", locked: "0" });
    expect(s.k1.locked).toBe("0");
    expect(s.k3).toEqual({ revoked: "1", budget: "" });
    expect(await r.t.redis.exists(r.keyName(9))).toBe(0);
    expect(s.markers).toEqual({ A: "released", R: null, U: null });
    expect(s.holds).toEqual({});
    expect(s.rate[0]).toBe("0");
    expect(s.events).toEqual([release("A", 1_000)]);
  });

  test("a close gives the lock back with one release event; a closed or expired lease id is never reopened", async () => {
    expect(await lease("A", { target: 3_000, slots: 4 })).toEqual([1, 3_000, 7_000, 4, 0, 96]);
    expect(await lease("A", { target: 0, floor: 0, back: 4 })).toEqual([1, 0, 10_000, 0, 3_000, 100]);
    expect(await r.t.redis.ttl(marker("A"))).toBeGreaterThan(600_000);
    expect(await lease("B", { target: 2_000 })).toEqual([1, 2_000, 8_000, 0, 0, 100]);
    expect(await r.sweep("B")).toEqual([1, 2_000]);
    const before = await state(["A", "B"]);
    expect(before.markers).toEqual({ A: "released", B: "expired" });
    expect(before.w).toEqual({ balance: "10000", locked: "0" });
    expect(before.rate).toEqual(["0", null]);
    expect(before.events).toEqual([release("A", 3_000), { ...release("B", 2_000), type: "expire" }]);
    for (const id of ["A", "B"]) {
      expect(await lease(id, { target: 0 })).toEqual([0, "HOLD_RESOLVED"]);
      expect(await lease(id, { target: 3_000, slots: 3, back: 2 })).toEqual([0, "HOLD_RESOLVED"]);
    }
    expect(await state(["A", "B"])).toEqual(before);
    // Closing with a floor keeps what is still in use locked: no event until the lock is 0.
    expect(await lease("C", { target: 3_000 })).toEqual([1, 3_000, 7_000, 0, 0, 100]);
    expect(await lease("C", { target: 0, floor: 1_000 })).toEqual([1, 1_000, 9_000, 0, 3_000, 100]);
    expect((await state()).events.length).toBe(2);
  });

  test("rate slots come from the sliding window; unused ones go back to the same window's counter", async () => {
    await r.t.redis.set(r.ratePrev, 40); // 40 × 45/60 = 30 of the limit of 50 already used
    const c = { target: 1_000, limit: 50 };
    expect(await lease("A", { ...c, slots: 15 })).toEqual([1, 1_000, 9_000, 15, 0, 5]);
    expect(await r.t.redis.pttl(r.rateCur)).toBeGreaterThan(110_000);
    expect(await lease("A", { ...c, slots: 10 })).toEqual([1, 1_000, 9_000, 5, 1_000, 0]);
    expect(await lease("A", { ...c, slots: 3 })).toEqual([1, 1_000, 9_000, 0, 1_000, 0]);
    expect((await state()).rate).toEqual(["20", "40"]);
    expect(await lease("A", { ...c, back: 8 })).toEqual([1, 1_000, 9_000, 0, 1_000, 8]);
    expect((await state()).rate).toEqual(["12", "40"]);
    // Never more than the window counted.
    expect(await lease("A", { ...c, back: 100, slots: 2 })).toEqual([1, 1_000, 9_000, 2, 1_000, 18]);
    expect((await state()).rate).toEqual(["2", "40"]);
  });

  test("Ledger.lease gives slots back only in the window they were taken in, never to the next one", async () => {
    // A window of 10^12 ms: every call of this test is in window 1 (window 0 ended in 2001).
    const ledger = new Ledger(r.t.redis, r.t.scripts, r.names, { rateLimitRequests: 10, rateLimitWindowMs: 1e12, holdTtlMs: 60_000 });
    await ledger.fence.readAll();
    const p = ledger.principal(1, wallet);
    const cur = r.names.rate(r.shard, wallet, 1);
    const ask = {
      leaseId: "A",
      target: 1_000,
      floor: 0,
      sharePerMille: 1000,
      least: 0,
      slots: 6,
      slotsBack: 0,
      slotsWindow: 1,
      ttlMs: 9_000,
    };
    expect(await ledger.lease(p, ask)).toMatchObject({ ok: true, locked: 1_000, slots: 6, rateLeft: 4, window: 1 });
    expect(await ledger.lease(p, { ...ask, slots: 0, slotsBack: 4, slotsWindow: 0 })).toMatchObject({ ok: true, slots: 0, rateLeft: 4 });
    expect(await r.t.redis.get(cur)).toBe("6");
    expect(await ledger.lease(p, { ...ask, slots: 0, slotsBack: 4 })).toMatchObject({ ok: true, slots: 0, rateLeft: 8 });
    expect(await r.t.redis.get(cur)).toBe("2");
  });

  test("a fenced call or bad arguments change nothing", async () => {
    expect(await lease("A", { target: 3_000, slots: 2 })).toEqual([1, 3_000, 7_000, 2, 0, 98]);
    const before = await state(["A", "B"]);
    expect(await lease("A", { target: 6_000, epoch: "0" })).toEqual([0, "FENCED", "1"]);
    await r.t.redis.set(r.names.fence(r.shard), "R:2");
    expect(await lease("B", { target: 1_000 })).toEqual([0, "FENCED", "R:2"]);
    await r.t.redis.set(r.names.fence(r.shard), "1");
    for (const bad of [
      { target: "1.5" },
      { floor: "-1" },
      { share: 1_001 },
      { least: "" },
      { slots: "x" },
      { back: "1e3" },
      { window: 0 },
      { elapsed: "9999999999999999" },
      { markerTtlS: 0 },
    ]) {
      await expect(lease("A", { target: 0, back: 2, ...bad })).rejects.toThrow("lease-8: bad arguments");
    }
    await expect(lease("", { target: 1_000 })).rejects.toThrow("lease-8: bad arguments");
    expect(await state(["A", "B"])).toEqual(before);
  });
});
