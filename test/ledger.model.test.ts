/**
 * Seeded random test of the Redis Lua ledger against an in-memory reference model (TigerBeetle style).
 * Every step runs one ledger operation on a private redis-server and the same operation on the model, then
 * compares all of Redis' ledger state with the model and checks the ledger's invariants.
 *
 * The seed is printed; replay a failure with LEDGER_SEED=<seed> bun test test/ledger.model.test.ts.
 * LEDGER_STEPS overrides the number of steps.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { Redis } from "ioredis";
import { ApiError } from "../src/errors.ts";
import { refusalError } from "../src/modules/chat/refusals.ts";
import { RedisNames } from "../src/ledger/names.ts";
import { Ledger, type KeyPrincipal } from "../src/ledger/ledger.ts";
import { LedgerScripts } from "../src/ledger/scripts.ts";
import { keyStateFields } from "../src/ledger/apiKeyState.ts";
import { privateRedis } from "./helpers/services.ts";

const SEED = process.env.LEDGER_SEED ? Number(process.env.LEDGER_SEED) >>> 0 : (Date.now() ^ (Math.random() * 2 ** 32)) >>> 0;
const STEPS = Number(process.env.LEDGER_STEPS ?? 2000);
const HOLD_TTL_MS = 3_600_000; // no hold expires by itself during the test: expiry is forced by moving its score
const MARKER_TTL_S = 7 * 24 * 3600;

/** mulberry32: a tiny 32-bit PRNG, enough to make every run replayable from its seed. */
function mulberry32(seed: number) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const rand = mulberry32(SEED);
const int = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1)); // inclusive
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
const chance = (p: number) => rand() < p;

// ---- the reference model -------------------------------------------------------------------------------

interface WalletM {
  addr: string;
  shard: string;
  credits: number; // Σ credits applied
  charges: number; // Σ charges posted
}
interface KeyM {
  id: number;
  wallet: WalletM;
  p: KeyPrincipal;
  revoked: boolean;
  budget: number | null;
  spent: number;
  requests: number;
  pt: number;
  ct: number;
  revenue: number;
}
type HoldState = "live" | "settled" | "released" | "expired";
interface HoldM {
  id: string;
  key: KeyM;
  amount: number;
  state: HoldState;
  /** The sweeper expired it at some point (a late settle may have followed). */
  expiredOnce?: boolean;
}
interface EventM {
  type: "charge" | "release" | "expire";
  hold: string;
  wallet: string;
  key: string;
  amount: string;
  model?: string;
  cost?: string;
  pt?: string;
  ct?: string;
}

const keys = new RedisNames(4);
// Wallet addresses whose last 4 hex digits pick the shard: two share shard 1, so they share holds/outbox/credited.
const wallets: WalletM[] = ["0000", "0001", "0005", "0002", "0007"].map((tail, i) => {
  const addr = `0x${String(i + 1).padStart(36, "a")}${tail}`;
  return { addr, shard: keys.shardOf(addr), credits: 0, charges: 0 };
});
const keyList: KeyM[] = [];
const holds = new Map<string, HoldM>();
const credited = new Map<string, Map<string, { wallet: WalletM; amount: number }>>(); // shard → credit id → credit
const events = new Map<string, EventM[]>(); // shard → outbox entries in order
const changes = { settle: 0, release: 0, expire: 0 }; // state-changing resolutions, by kind
for (const s of keys.allShards()) {
  credited.set(s, new Map());
  events.set(s, []);
}

const balanceOf = (w: WalletM) => w.credits - w.charges;
const liveHolds = () => [...holds.values()].filter((h) => h.state === "live");
const lockedOfWallet = (w: WalletM) => liveHolds().filter((h) => h.key.wallet === w).reduce((s, h) => s + h.amount, 0);
const lockedOfKey = (k: KeyM) => liveHolds().filter((h) => h.key === k).reduce((s, h) => s + h.amount, 0);

// ---- the system under test -----------------------------------------------------------------------------

let server: Awaited<ReturnType<typeof privateRedis>>;
let redis: Redis;
let scripts: LedgerScripts;
let ledger: Ledger;

beforeAll(async () => {
  server = await privateRedis();
  redis = new Redis(server.socket);
  scripts = await LedgerScripts.connect(server.socket);
  ledger = new Ledger(redis, scripts, keys, { rateLimitRequests: 1e9, rateLimitWindowMs: 60_000, holdTtlMs: HOLD_TTL_MS });
  for (const s of keys.allShards()) await redis.set(keys.fence(s), "1");
  await ledger.fence.readAll();
  // Two keys per wallet, one of them with a budget; written as KeyService.create writes them.
  let id = 1;
  for (const w of wallets) {
    for (const budget of [null, int(1, 20) * 500_000]) {
      const p = ledger.principal(id, w.addr);
      await redis.hset(p.apiKeyName, keyStateFields({ revoked: false, budget }));
      keyList.push({ id, wallet: w, p, revoked: false, budget, spent: 0, requests: 0, pt: 0, ct: 0, revenue: 0 });
      id++;
    }
  }
});
afterAll(async () => {
  redis?.disconnect();
  scripts?.close();
  await server?.stop();
});

const holdKeys = (h: HoldM) => {
  const s = h.key.p.shard;
  return [h.key.p.walletName, h.key.p.apiKeyName, keys.holds(s), keys.holdMarker(s, h.id), keys.outbox(s), keys.fence(s)];
};
/** The epoch every shard's fence is open at (set up below as a rebuild would leave it). */
const EPOCH = "1";

/** What the model says reserve must do, given the checks' order in reserve-7.lua. */
function expectedReserve(k: KeyM, holdId: string, amount: number):
  | { ok: true; available: number; fresh: boolean }
  | { ok: false; code: "UNAUTHORIZED" | "KEY_BUDGET_EXCEEDED" | "INSUFFICIENT_BALANCE"; extra?: Record<string, number> } {
  if (k.revoked) return { ok: false, code: "UNAUTHORIZED" };
  const available = balanceOf(k.wallet) - lockedOfWallet(k.wallet);
  if (holds.get(holdId)?.state === "live") return { ok: true, available, fresh: false };
  if (k.budget !== null) {
    const left = k.budget - k.spent - lockedOfKey(k);
    if (left < amount) return { ok: false, code: "KEY_BUDGET_EXCEEDED", extra: { key_budget_left_usdc: left, required_usdc: amount } };
  }
  if (available < amount) return { ok: false, code: "INSUFFICIENT_BALANCE", extra: { available_usdc: available, required_usdc: amount } };
  return { ok: true, available: available - amount, fresh: true };
}

async function reserveAndCheck(k: KeyM, holdId: string, amount: number): Promise<string> {
  const want = expectedReserve(k, holdId, amount);
  let got: { available: number } | ApiError;
  try {
    const r = await ledger.reserve(k.p, holdId, amount);
    got = r.ok ? r : refusalError(r);
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    got = e;
  }
  if (want.ok) {
    if (got instanceof ApiError) throw new Error(`reserve ${amount} on key ${k.id} rejected with ${got.code}, model accepts`);
    expect(got.available).toBe(want.available);
    if (want.fresh) holds.set(holdId, { id: holdId, key: k, amount, state: "live" });
    return want.fresh ? "reserve:held" : "reserve:duplicate";
  }
  if (!(got instanceof ApiError)) throw new Error(`reserve ${amount} on key ${k.id} accepted, model says ${want.code}`);
  expect(got.code).toBe(want.code);
  if (want.extra) expect(got.extra).toMatchObject(want.extra);
  return `reserve:${want.code}`;
}

function chargeEvent(h: HoldM, charge: number, cost: number, pt: number, ct: number): EventM {
  return {
    type: "charge", hold: h.id, wallet: h.key.wallet.addr, key: String(h.key.id), model: "m/model",
    amount: String(charge), cost: String(cost), pt: String(pt), ct: String(ct),
  };
}

async function settleAndCheck(h: HoldM, charge: number): Promise<string> {
  const pt = int(0, 5000);
  const ct = int(0, 5000);
  const cost = int(0, charge);
  const ok = await ledger.settle(h.key.p, h.id, charge, { promptTokens: pt, completionTokens: ct, costMicro: cost, model: "m/model" });
  // A live hold posts; an expired one still records the charge (the inference happened); anything else is a no-op.
  const posts = h.state === "live" || h.state === "expired";
  expect(ok).toBe(posts);
  if (!posts) return `settle:noop-${h.state}`;
  const k = h.key;
  const was = h.state;
  h.state = "settled";
  k.wallet.charges += charge;
  k.spent += charge;
  k.requests += 1;
  k.pt += pt;
  k.ct += ct;
  k.revenue += charge - cost;
  changes.settle++;
  events.get(k.p.shard)!.push(chargeEvent(h, charge, cost, pt, ct));
  return was === "live" ? "settle:posted" : "settle:late-after-expiry";
}

async function releaseAndCheck(h: HoldM): Promise<string> {
  const r = await scripts.release(...holdKeys(h), h.id, "release", MARKER_TTL_S, EPOCH);
  if (h.state === "live") {
    expect(r).toEqual([1, h.amount]);
    h.state = "released";
    changes.release++;
    events.get(h.key.p.shard)!.push({ type: "release", hold: h.id, wallet: h.key.wallet.addr, key: String(h.key.id), amount: String(h.amount) });
    return "release:released";
  }
  expect(r).toEqual([0, h.state]);
  return `release:noop-${h.state}`;
}

/** Compares every piece of ledger state in Redis with the model, and checks the invariants against Redis. */
async function checkAll(touched: HoldM[]) {
  const p = redis.pipeline();
  for (const w of wallets) p.hmget(keys.wallet(w.shard, w.addr), "balance", "locked");
  for (const k of keyList) p.hmget(k.p.apiKeyName, "revoked", "budget", "spent", "locked", "requests", "prompt_tokens", "completion_tokens", "revenue");
  for (const s of keys.allShards()) p.zcard(keys.holds(s)).xlen(keys.outbox(s));
  for (const h of touched) p.get(keys.holdMarker(h.key.p.shard, h.id)).zscore(keys.holds(h.key.p.shard), h.id);
  const res = (await p.exec())!.map(([err, v]) => {
    if (err) throw err;
    return v;
  });
  let i = 0;
  const num = (x: string | null) => (x === null ? 0 : Number(x));

  for (const w of wallets) {
    const [balance, locked] = res[i++] as (string | null)[];
    // balance = Σ credits − Σ charges; locked = Σ live holds of the wallet
    expect({ wallet: w.addr, balance: num(balance!), locked: num(locked!) }).toEqual({
      wallet: w.addr,
      balance: w.credits - w.charges,
      locked: lockedOfWallet(w),
    });
  }
  for (const k of keyList) {
    const [revoked, budget, spent, locked, requests, pt, ct, revenue] = res[i++] as (string | null)[];
    expect({ key: k.id, revoked, budget, spent: num(spent!), locked: num(locked!), requests: num(requests!), pt: num(pt!), ct: num(ct!), revenue: num(revenue!) }).toEqual({
      key: k.id,
      revoked: k.revoked ? "1" : "0",
      budget: k.budget === null ? "" : String(k.budget),
      spent: k.spent,
      locked: lockedOfKey(k),
      requests: k.requests,
      pt: k.pt,
      ct: k.ct,
      revenue: k.revenue,
    });
  }
  for (const s of keys.allShards()) {
    const live = liveHolds().filter((h) => h.key.p.shard === s).length;
    expect({ shard: s, zcard: res[i++], outbox: res[i++] }).toEqual({ shard: s, zcard: live, outbox: events.get(s)!.length });
  }
  for (const h of touched) {
    const marker = res[i++];
    const score = res[i++];
    expect({ hold: h.id, marker, inZset: score !== null }).toEqual({
      hold: h.id,
      marker: h.state === "live" ? `live|${h.amount}|${h.key.wallet.addr}|${h.key.id}` : h.state,
      inZset: h.state === "live",
    });
  }
}

// ---- the steps -----------------------------------------------------------------------------------------

let holdSeq = 0;
let creditSeq = 0;
const newHoldId = () => `h-${SEED}-${++holdSeq}`;
/** A resolved hold, its state drawn first so that rare states (expired) come up as often as common ones. */
function pickResolved(): HoldM | null {
  const byState = new Map<HoldState, HoldM[]>();
  for (const h of holds.values()) if (h.state !== "live") byState.set(h.state, [...(byState.get(h.state) ?? []), h]);
  return byState.size === 0 ? null : pick(pick([...byState.values()]));
}
const activeKeys = () => keyList.filter((k) => !k.revoked);

type Step = { name: string; weight: number; run(): Promise<{ label: string; touched: HoldM[] } | null> };

const steps: Step[] = [
  {
    name: "credit",
    weight: 10,
    async run() {
      const w = pick(wallets);
      const amount = int(1, 5_000_000);
      const id = `c-${++creditSeq}`;
      const r = await ledger.credit(w.addr, id, amount);
      w.credits += amount;
      credited.get(w.shard)!.set(id, { wallet: w, amount });
      expect(r).toEqual({ applied: true, balance: balanceOf(w) });
      return { label: "credit:applied", touched: [] };
    },
  },
  {
    name: "credit-repeat",
    weight: 4,
    async run() {
      const all = [...credited.entries()].flatMap(([, m]) => [...m.entries()]);
      if (all.length === 0) return null;
      const [id, c] = pick(all);
      // The same id again, even with another amount, or for another wallet of the same shard: nothing happens.
      const w = chance(0.7) ? c.wallet : pick(wallets.filter((x) => x.shard === c.wallet.shard));
      const r = await ledger.credit(w.addr, id, chance(0.5) ? c.amount : int(1, 9_000_000));
      expect(r).toEqual({ applied: false, balance: balanceOf(w) });
      return { label: "credit:repeat-noop", touched: [] };
    },
  },
  {
    name: "reserve",
    weight: 30,
    async run() {
      const active = activeKeys();
      const k = chance(0.9) && active.length > 0 ? pick(active) : pick(keyList);
      // Mostly affordable amounts, sometimes more than any wallet has.
      const amount = chance(0.85) ? int(1, 2_000_000) : int(2_000_001, 40_000_000);
      const id = newHoldId();
      const label = await reserveAndCheck(k, id, amount);
      return { label, touched: holds.has(id) ? [holds.get(id)!] : [] };
    },
  },
  {
    name: "reserve-duplicate",
    weight: 5,
    async run() {
      const live = liveHolds();
      if (live.length === 0) return null;
      const h = pick(live);
      // A retry with the same hold id (any amount) holds nothing twice.
      const label = await reserveAndCheck(h.key, h.id, chance(0.5) ? h.amount : int(1, 40_000_000));
      return { label, touched: [h] };
    },
  },
  {
    name: "reserve-resolved",
    weight: 3,
    async run() {
      const h = pickResolved();
      if (!h || h.key.revoked) return null;
      // A settled, released or expired hold id never opens a hold again, and nothing changes (rate counters too).
      const err = await ledger.reserve(h.key.p, h.id, int(1, 1000)).catch((e) => e);
      expect(err).toBeInstanceOf(Error);
      expect((err as Error).message).toBe(`hold ${h.id} was already resolved`);
      return { label: "reserve:resolved-hold", touched: [h] };
    },
  },
  {
    name: "reserve-unknown-key",
    weight: 1,
    async run() {
      const w = pick(wallets);
      const p = ledger.principal(9000 + int(0, 99), w.addr);
      const r = await ledger.reserve(p, newHoldId(), int(1, 1000));
      const err = r.ok ? r : refusalError(r);
      expect(err).toBeInstanceOf(ApiError);
      expect((err as ApiError).code).toBe("UNAUTHORIZED");
      return { label: "reserve:unknown-key", touched: [] };
    },
  },
  {
    name: "settle",
    weight: 20,
    async run() {
      const live = liveHolds();
      if (live.length === 0) return null;
      const h = pick(live);
      // Usually at most the hold, sometimes more (the charge is what the usage says, not what was held).
      const charge = chance(0.8) ? int(0, h.amount) : int(h.amount + 1, h.amount * 3 + 1);
      return { label: await settleAndCheck(h, charge), touched: [h] };
    },
  },
  {
    name: "settle-resolved",
    weight: 6,
    async run() {
      const h = pickResolved();
      if (!h) return null;
      return { label: await settleAndCheck(h, int(0, 3_000_000)), touched: [h] };
    },
  },
  {
    name: "late-settle-after-expiry",
    weight: 3,
    async run() {
      const expired = [...holds.values()].filter((h) => h.state === "expired");
      if (expired.length === 0) return null;
      const h = pick(expired);
      return { label: await settleAndCheck(h, int(0, h.amount * 2)), touched: [h] };
    },
  },
  {
    name: "settle-unknown",
    weight: 1,
    async run() {
      const k = pick(keyList);
      const ok = await ledger.settle(k.p, newHoldId(), int(1, 1000), { promptTokens: 1, completionTokens: 1, costMicro: 0, model: "m/model" });
      expect(ok).toBe(false);
      return { label: "settle:unknown-hold", touched: [] };
    },
  },
  {
    name: "release",
    weight: 10,
    async run() {
      const live = liveHolds();
      if (live.length === 0) return null;
      const h = pick(live);
      return { label: await releaseAndCheck(h), touched: [h] };
    },
  },
  {
    name: "release-resolved",
    weight: 4,
    async run() {
      const h = pickResolved();
      if (!h) return null;
      // Through the Ledger API (boolean) or the script itself (which says why nothing changed).
      if (chance(0.5)) {
        expect(await ledger.release(h.key.p, h.id)).toBe(false);
        return { label: `release:noop-${h.state}`, touched: [h] };
      }
      return { label: await releaseAndCheck(h), touched: [h] };
    },
  },
  {
    name: "release-unknown",
    weight: 1,
    async run() {
      const k = pick(keyList);
      const id = newHoldId();
      const r = await scripts.release(...holdKeys({ id, key: k, amount: 0, state: "live" }), id, "release", MARKER_TTL_S, EPOCH);
      expect(r).toEqual([0, "UNKNOWN_HOLD"]);
      return { label: "release:unknown-hold", touched: [] };
    },
  },
  {
    name: "expire",
    weight: 5,
    async run() {
      const live = liveHolds();
      if (live.length === 0) return null;
      // Move 1..3 holds' expiry into the past (no sleeping), then let the sweeper find exactly those.
      const chosen = [...new Set(Array.from({ length: int(1, 3) }, () => pick(live)))];
      // Distinct past scores, so the sweeper (which walks by score) expires them in the chosen order.
      for (const [n, h] of chosen.entries()) expect(await redis.zadd(keys.holds(h.key.p.shard), "XX", "CH", n + 1, h.id)).toBe(1);
      expect(await ledger.sweepExpired()).toBe(chosen.length);
      for (const h of chosen) {
        h.state = "expired";
        h.expiredOnce = true;
        changes.expire++;
        events.get(h.key.p.shard)!.push({ type: "expire", hold: h.id, wallet: h.key.wallet.addr, key: String(h.key.id), amount: String(h.amount) });
      }
      return { label: "expire:swept", touched: chosen };
    },
  },
  {
    name: "expire-live",
    weight: 2,
    async run() {
      const live = liveHolds();
      if (live.length === 0) return null;
      const h = pick(live);
      // The sweeper's path on a hold whose expiry has not passed never touches it.
      expect(await scripts.release(...holdKeys(h), h.id, "expire", MARKER_TTL_S, EPOCH)).toEqual([0, "LIVE"]);
      expect(await ledger.sweepExpired()).toBe(0);
      return { label: "expire:still-live", touched: [h] };
    },
  },
  {
    name: "revoke",
    weight: 1,
    async run() {
      const active = activeKeys();
      if (active.length <= 6) return null; // keep most keys usable
      const k = pick(active);
      await redis.hset(k.p.apiKeyName, "revoked", "1");
      k.revoked = true;
      return { label: "revoke", touched: [] };
    },
  },
];

const totalWeight = steps.reduce((s, x) => s + x.weight, 0);
function chooseStep(): Step {
  let r = rand() * totalWeight;
  for (const s of steps) if ((r -= s.weight) < 0) return s;
  return steps.at(-1)!;
}

test(`random ledger operations match the reference model (seed ${SEED}, ${STEPS} steps)`, async () => {
  console.log(`ledger model: LEDGER_SEED=${SEED} LEDGER_STEPS=${STEPS}`);
  // Start with some money everywhere so most reserves pass.
  for (const w of wallets) {
    const amount = int(1_000_000, 10_000_000);
    const id = `c-${++creditSeq}`;
    expect(await ledger.credit(w.addr, id, amount)).toEqual({ applied: true, balance: amount });
    w.credits += amount;
    credited.get(w.shard)!.set(id, { wallet: w, amount });
  }
  await checkAll([]);

  const seen = new Map<string, number>();
  for (let n = 1; n <= STEPS; ) {
    const step = chooseStep();
    let outcome;
    try {
      outcome = await step.run();
      if (outcome) await checkAll(outcome.touched);
    } catch (e) {
      throw new Error(`LEDGER_SEED=${SEED}: step ${n} (${step.name}) diverged from the model: ${(e as Error).message}`, { cause: e });
    }
    if (!outcome) continue; // not applicable now (e.g. no live hold): draw again
    seen.set(outcome.label, (seen.get(outcome.label) ?? 0) + 1);
    n++;
  }
  console.log("outcomes:", Object.fromEntries([...seen.entries()].sort()));

  // The interesting paths all happened (2000 steps make each a near certainty whatever the seed).
  if (STEPS >= 2000) {
    for (const label of [
      "credit:applied", "credit:repeat-noop", "reserve:held", "reserve:duplicate", "reserve:UNAUTHORIZED",
      "reserve:KEY_BUDGET_EXCEEDED", "reserve:INSUFFICIENT_BALANCE", "settle:posted", "settle:late-after-expiry",
      "settle:noop-settled", "settle:noop-released", "release:released", "release:noop-settled", "release:noop-released",
      "release:noop-expired", "expire:swept", "expire:still-live",
    ]) {
      expect({ label, seen: (seen.get(label) ?? 0) > 0 }).toEqual({ label, seen: true });
    }
  }

  // The outbox holds exactly one entry per state-changing settle / release / expire, in order, per shard.
  const perHold = [...holds.values()].reduce((n, h) => n + (h.state === "live" ? 0 : 1) + (h.state === "settled" && h.expiredOnce ? 1 : 0), 0);
  expect(changes.settle + changes.release + changes.expire).toBe(perHold);
  let xlenTotal = 0;
  for (const s of keys.allShards()) {
    const xlen = await redis.xlen(keys.outbox(s));
    xlenTotal += xlen;
    const entries = await redis.xrange(keys.outbox(s), "-", "+");
    expect(entries.length).toBe(xlen);
    const asEvents = entries.map(([, fields]) => {
      // One field 'e': the event as JSON; the model keeps every value as the string it was given as.
      expect(fields[0]).toBe("e");
      const f: Record<string, string> = {};
      for (const [k, v] of Object.entries(JSON.parse(fields[1]!) as Record<string, string | number>)) f[k] = String(v);
      expect(Number(f.at)).toBeGreaterThan(1_600_000_000_000);
      expect(Number(f.at)).toBeLessThan(4_000_000_000_000);
      delete f.at;
      return f;
    });
    expect(asEvents).toEqual(events.get(s)! as unknown as Record<string, string>[]);
  }
  expect(xlenTotal).toBe(changes.settle + changes.release + changes.expire);
  expect(changes.settle).toBe((seen.get("settle:posted") ?? 0) + (seen.get("settle:late-after-expiry") ?? 0));
  expect(changes.release).toBe(seen.get("release:released") ?? 0);
}, 120_000);
