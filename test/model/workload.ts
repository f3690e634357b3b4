/**
 * The workload of the ledger model test (TigerBeetle's workload): a seeded random choice of ledger operations,
 * each run on the system under test (the Ledger on a private redis-server) and on the reference model, whose
 * answer says what the ledger's must be. The rules live in the model (reference.ts); this file only generates,
 * drives and compares. The test (ledger.model.test.ts) wires them and compares
 * the whole state after every step.
 */
import { expect } from "bun:test";
import type { Redis } from "ioredis";
import { ApiError } from "../../src/errors.ts";
import type { ChargeDetails, Ledger, ReserveOutcome } from "../../src/ledger/ledger.ts";
import type { RedisNames } from "../../src/ledger/names.ts";
import type { LedgerScripts } from "../../src/ledger/scripts.ts";
import { refusalError } from "../../src/billing/refusals.ts";
import type { Model } from "../../src/providers/catalog.ts";
import { billedMicro, boundedRequest, dearestBound } from "../../src/tariff/index.ts";
import type { HoldM, KeyM, LeaseM, ReferenceModel } from "./reference.ts";

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

/** The random choices of one run, all drawn from its seed. */
export function randomFrom(seed: number) {
  const rand = mulberry32(seed);
  return {
    rand,
    int: (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1)), // inclusive
    pick: <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!,
    chance: (p: number) => rand() < p,
  };
}

/** The system under test: the ledger and the Redis it runs on. */
export interface LedgerUnderTest {
  redis: Redis;
  scripts: LedgerScripts;
  ledger: Ledger;
  names: RedisNames;
}

/** What one step did: its outcome's label (counted, so a run shows every path was taken) and the holds it touched. */
export type StepOutcome = { label: string; touched: HoldM[]; labels?: string[]; leases?: LeaseM[]; charges?: string[] } | null;
/** One kind of step, drawn with its weight. */
export type Step = { name: string; weight: number; run(): Promise<StepOutcome> };

export const HOLD_TTL_MS = 3_600_000; // no hold expires by itself during the test: expiry is forced by moving its score
const MARKER_TTL_S = 7 * 24 * 3600;
/** The epoch every shard's fence is open at (the test sets it up as a rebuild would leave it). */
export const EPOCH = "1";

/** EVALSHA + EVAL calls Redis ran so far (INFO commandstats). */
export async function evalCalls(redis: Redis): Promise<number> {
  const info = await redis.info("commandstats");
  return [...info.matchAll(/cmdstat_eval(?:sha)?:calls=(\d+)/g)].reduce((s, x) => s + Number(x[1]), 0);
}

/** The workload over one model and one ledger (and `more` steps, the leases'): the next step to run, and the credit ids it hands out. */
export function ledgerWorkload(
  m: ReferenceModel,
  sut: LedgerUnderTest,
  random: ReturnType<typeof randomFrom>,
  seed: number,
  more: Step[] = [],
) {
  const { redis, scripts, ledger, names } = sut;
  const { rand, int, pick, chance } = random;
  let holdSeq = 0;
  let creditSeq = 0;
  const newHoldId = () => `h-${seed}-${++holdSeq}`;
  const newCreditId = () => `c-${++creditSeq}`;

  const holdKeys = (h: HoldM) => {
    const s = h.key.p.shard;
    return [h.key.p.walletName, h.key.p.apiKeyName, names.holds(s), names.holdMarker(s, h.id), names.outbox(s), names.fence(s)];
  };

  /**
   * The model reserves now (so the next plan of a burst sees the hold, as the next item of a batch does); the
   * returned check compares the ledger's answer with the model's.
   */
  function planReserve(k: KeyM, holdId: string, amount: number): (run: Promise<ReserveOutcome>) => Promise<string> {
    const want = m.reserve(k, holdId, amount);
    return async (run) => {
      let got: { available: number } | ApiError;
      try {
        const r = await run;
        got = r.ok ? r : refusalError(r);
      } catch (e) {
        if (!(e instanceof ApiError)) throw e;
        got = e;
      }
      if (want.ok) {
        if (got instanceof ApiError) throw new Error(`reserve ${amount} on key ${k.id} rejected with ${got.code}, model accepts`);
        expect(got.available).toBe(want.available);
        return want.fresh ? "reserve:held" : "reserve:duplicate";
      }
      if (!(got instanceof ApiError)) throw new Error(`reserve ${amount} on key ${k.id} accepted, model says ${want.code}`);
      expect(got.code as string).toBe(want.code);
      if (want.extra) expect(got.extra).toMatchObject(want.extra);
      return `reserve:${want.code}`;
    };
  }

  function reserveAndCheck(k: KeyM, holdId: string, amount: number): Promise<string> {
    const check = planReserve(k, holdId, amount);
    return check(ledger.reserve(k.p, holdId, amount));
  }

  /** Like planReserve: the model posts the charge now, the returned check compares settle's answer. */
  function planSettle(h: HoldM, charge: number): { details: ChargeDetails; check: (run: Promise<boolean>) => Promise<string> } {
    const pt = int(0, 5000);
    const ct = int(0, 5000);
    const cost = int(0, charge);
    const details = { promptTokens: pt, completionTokens: ct, costMicro: cost, model: "m/model" };
    const { posts, was } = m.settle(h, charge, { pt, ct, cost });
    const check = async (run: Promise<boolean>) => {
      expect(await run).toBe(posts);
      if (!posts) return `settle:noop-${was}`;
      return was === "live" ? "settle:posted" : "settle:late-after-expiry";
    };
    return { details, check };
  }

  function settleAndCheck(h: HoldM, charge: number): Promise<string> {
    const { details, check } = planSettle(h, charge);
    return check(ledger.settle(h.key.p, h.id, charge, details));
  }

  /**
   * Concurrent reserves and settles of one shard, not awaited one by one, so the batcher sends them as batches
   * (the first alone, the rest together when it answers). The model takes them in the order they were made; the
   * ledger must answer each alike. Reserves and settles of one burst touch different wallets (their calls may
   * run in either order). Returns the holds touched and how many script calls Redis ran for the burst.
   */
  async function burst(): Promise<{ touched: HoldM[]; labels: string[]; mode: string; calls: number }> {
    const shardOf = (k: KeyM) => k.p.shard;
    const shard = pick(m.wallets.filter((w) => m.wallets.some((x) => x !== w && x.shard === w.shard))).shard;
    const [wa, wb] = chance(0.5) ? m.wallets.filter((w) => w.shard === shard) : m.wallets.filter((w) => w.shard === shard).reverse();
    const mode = pick(["reserves", "settles", "mixed"] as const);
    const checks: Promise<string>[] = [];
    const touched = new Set<HoldM>();
    const before = await evalCalls(redis);
    const n = int(2, 12);
    const newIds: string[] = [];
    for (let i = 0; i < n; i++) {
      const kind = mode === "mixed" ? pick(["reserve", "settle"] as const) : mode === "reserves" ? "reserve" : "settle";
      if (kind === "reserve") {
        const keys = m.keyList.filter((k) => k.wallet === wa);
        const k = pick(keys);
        // Fresh ids mostly; sometimes one of this burst again (a retry inside one batch) or a live hold of the wallet.
        const live = m.liveHolds().filter((h) => h.key.wallet === wa);
        const id = chance(0.2) && newIds.length > 0 ? pick(newIds) : chance(0.1) && live.length > 0 ? pick(live).id : newHoldId();
        const hk = m.holds.get(id)?.key ?? k;
        const amount = chance(0.8) ? int(1, 2_000_000) : int(2_000_001, 40_000_000);
        newIds.push(id);
        checks.push(planReserve(hk, id, amount)(ledger.reserve(hk.p, id, amount)));
        if (m.holds.has(id)) touched.add(m.holds.get(id)!);
      } else {
        const wallet = mode === "mixed" ? wb : pick([wa, wb]);
        const mine = [...m.holds.values()].filter((h) => h.key.wallet === wallet && shardOf(h.key) === shard);
        if (mine.length === 0) continue;
        const live = mine.filter((h) => h.state === "live");
        const h = live.length > 0 && chance(0.7) ? pick(live) : pick(mine);
        const charge = int(0, h.amount + 1);
        const { details, check } = planSettle(h, charge);
        checks.push(check(ledger.settle(h.key.p, h.id, charge, details)));
        touched.add(h);
      }
    }
    const labels = await Promise.all(checks);
    return { touched: [...touched], labels, mode, calls: (await evalCalls(redis)) - before };
  }

  async function releaseAndCheck(h: HoldM): Promise<string> {
    const got = await scripts.release(holdKeys(h), EPOCH, h.id, "release", MARKER_TTL_S);
    const want = m.release(h);
    expect(got).toEqual(want);
    return want[0] === 1 ? "release:released" : `release:noop-${want[1]}`;
  }

  /** A catalog model at random prices (pico-USD per token), for a failover chain. */
  const chainModel = (n: number): Model => {
    const promptPico = int(0, 30_000_000);
    const completionPico = int(0, 60_000_000);
    return {
      id: `m/chain-${n}`,
      name: `chain ${n}`,
      provider: { name: "m", type: "openai", baseUrl: "http://127.0.0.1:9/v1" },
      upstreamModel: `chain-${n}`,
      contextLength: int(500, 200_000),
      maxOutputTokens: int(1, 8_192),
      promptPricePer1MTokens: promptPico / 1e6,
      completionPricePer1M: completionPico / 1e6,
      promptPico,
      completionPico,
      costPromptPico: int(0, promptPico),
      costCompletionPico: int(0, completionPico),
      kind: "chat",
    };
  };

  /**
   * A request with catalog `fallbacks` (ChatService): one hold, the dearest of its chain's bounds (the tariff's
   * own), then the model that served settles its usage at its own prices, or, every model failing, the hold is
   * released. The charge never exceeds the hold, and is posted once.
   */
  async function failover(): Promise<StepOutcome> {
    const active = m.activeKeys();
    if (active.length === 0) return null;
    const k = pick(active);
    const body = { model: "m/chain-0", messages: [{ role: "user", content: "x".repeat(int(1, 3_000)) }], max_tokens: int(1, 8_192) };
    const chain = Array.from({ length: int(1, 3) }, (_, n) => chainModel(n));
    const bounds = chain.map((model) => boundedRequest(model, body, false).bound);
    const hold = dearestBound(bounds);
    for (const b of bounds) expect(b.micro).toBeLessThanOrEqual(hold.micro);
    const id = newHoldId();
    const reserved = await reserveAndCheck(k, id, hold.micro);
    const h = m.holds.get(id);
    if (!h || reserved !== "reserve:held") return { label: `failover:${reserved}`, touched: h ? [h] : [] };
    // Which model answered: the first, a fallback, or none (each failed before its answer).
    const served = int(0, chain.length);
    if (served === chain.length) {
      const label = await releaseAndCheck(h);
      return { label: "failover:all-failed", touched: [h], labels: [reserved, label] };
    }
    const model = chain[served]!;
    const bound = bounds[served]!;
    const pt = int(0, bound.promptTokens);
    const ct = int(0, bound.completionTokens);
    const usage = { prompt_tokens: pt, completion_tokens: ct };
    const charge = billedMicro(model, usage);
    expect(charge).toBeLessThanOrEqual(bound.micro);
    expect(charge).toBeLessThanOrEqual(hold.micro);
    const cost = int(0, charge);
    const { posts } = m.settle(h, charge, { pt, ct, cost });
    expect(posts).toBe(true);
    expect(await ledger.settle(k.p, id, charge, { promptTokens: pt, completionTokens: ct, costMicro: cost, model: "m/model" })).toBe(true);
    return {
      label: served === 0 ? "failover:served-first" : "failover:served-fallback",
      touched: [h],
      labels: [reserved, "settle:posted"],
    };
  }

  /**
   * A request to a model with cache prices (random, a write price possibly far above the prompt's), with or without
   * a cache_control breakpoint: its hold is the tariff's (the dearest prompt rate it can be billed at), and every
   * usage shape the provider may report within the bound (cache reads; with a breakpoint, 5-minute and 1-hour
   * writes too) is charged at most the hold; one of them, drawn, is settled with its cache split.
   */
  async function cachedCall(): Promise<StepOutcome> {
    const active = m.activeKeys();
    if (active.length === 0) return null;
    const k = pick(active);
    const base = chainModel(0);
    const p = Math.max(1, base.promptPico);
    const model: Model = {
      ...base,
      id: "m/cached",
      provider: { name: "m", type: "anthropic", baseUrl: "http://127.0.0.1:9/v1" },
      cachedPromptPico: int(0, 2 * p),
      cacheWritePico: int(0, 3 * p),
      cacheWrite1hPico: int(0, 4 * p),
      costCachedPromptPico: int(0, p),
    };
    const breakpoint = chance(0.5);
    const part = { type: "text", text: "x".repeat(int(1, 3_000)), ...(breakpoint && { cache_control: { type: "ephemeral" } }) };
    const body = { model: model.id, messages: [{ role: "user", content: [part] }], max_tokens: int(1, 8_192) };
    const { bound } = boundedRequest(model, body, false);
    const pt = bound.promptTokens;
    const ct = bound.completionTokens;
    // Every prompt token of one kind, at the bound: the dearest shapes there are.
    const kinds = breakpoint
      ? (["cached_prompt_tokens", "cache_write_tokens", "cache_write_1h_tokens"] as const)
      : (["cached_prompt_tokens"] as const);
    expect(billedMicro(model, { prompt_tokens: pt, completion_tokens: ct })).toBeLessThanOrEqual(bound.micro);
    for (const kind of kinds)
      expect(billedMicro(model, { prompt_tokens: pt, completion_tokens: ct, [kind]: pt })).toBeLessThanOrEqual(bound.micro);
    // A drawn split of a drawn prompt.
    const prompt = int(0, pt);
    const read = int(0, prompt);
    const write = breakpoint ? int(0, prompt - read) : 0;
    const write1h = breakpoint ? int(0, prompt - read - write) : 0;
    const usage = {
      prompt_tokens: prompt,
      completion_tokens: int(0, ct),
      cached_prompt_tokens: read,
      cache_write_tokens: write,
      cache_write_1h_tokens: write1h,
    };
    const charge = billedMicro(model, usage);
    expect(charge).toBeLessThanOrEqual(bound.micro);

    const id = newHoldId();
    const reserved = await reserveAndCheck(k, id, bound.micro);
    const h = m.holds.get(id);
    if (!h || reserved !== "reserve:held") return { label: `cached:${reserved}`, touched: h ? [h] : [] };
    const cost = int(0, charge);
    const { posts } = m.settle(h, charge, { pt: prompt, ct: usage.completion_tokens, cost, cr: read, cw: write, cw1h: write1h });
    expect(posts).toBe(true);
    const details = {
      promptTokens: prompt,
      completionTokens: usage.completion_tokens,
      costMicro: cost,
      model: "m/model", // the model's books name every charge so
      cachedPromptTokens: read,
      cacheWriteTokens: write,
      cacheWrite1hTokens: write1h,
    };
    expect(await ledger.settle(k.p, id, charge, details)).toBe(true);
    return {
      label: breakpoint ? "cached:settled-with-breakpoint" : "cached:settled-reads-only",
      touched: [h],
      labels: [reserved, "settle:posted"],
    };
  }

  const steps: Step[] = [
    {
      name: "failover",
      weight: 6,
      run: failover,
    },
    {
      name: "cached",
      weight: 6,
      run: cachedCall,
    },
    {
      name: "burst",
      weight: 12,
      async run() {
        const b = await burst();
        if (b.labels.length === 0) return null;
        // One call for the first reserve and one for the first settle, then one per kind for the rest.
        expect(b.calls).toBeLessThanOrEqual(Math.min(b.labels.length, b.mode === "mixed" ? 4 : 2));
        return { label: b.labels.length >= 3 ? `burst:batched-${b.mode}` : "burst:small", touched: b.touched, labels: b.labels };
      },
    },
    {
      name: "credit",
      weight: 10,
      async run() {
        const w = pick(m.wallets);
        const amount = int(1, 5_000_000);
        const id = newCreditId();
        expect(await ledger.credit(w.addr, id, amount)).toEqual(m.credit(w, id, amount));
        return { label: "credit:applied", touched: [] };
      },
    },
    {
      name: "credit-repeat",
      weight: 4,
      async run() {
        const all = [...m.credited.entries()].flatMap(([, byId]) => [...byId.entries()]);
        if (all.length === 0) return null;
        const [id, c] = pick(all);
        // The same id again, even with another amount, or for another wallet of the same shard: nothing happens.
        const w = chance(0.7) ? c.wallet : pick(m.wallets.filter((x) => x.shard === c.wallet.shard));
        const amount = chance(0.5) ? c.amount : int(1, 9_000_000);
        const want = m.credit(w, id, amount);
        expect(want.applied).toBe(false);
        expect(await ledger.credit(w.addr, id, amount)).toEqual(want);
        return { label: "credit:repeat-noop", touched: [] };
      },
    },
    {
      name: "reserve",
      weight: 30,
      async run() {
        const active = m.activeKeys();
        const k = chance(0.9) && active.length > 0 ? pick(active) : pick(m.keyList);
        // Mostly affordable amounts, sometimes more than any wallet has.
        const amount = chance(0.85) ? int(1, 2_000_000) : int(2_000_001, 40_000_000);
        const id = newHoldId();
        const label = await reserveAndCheck(k, id, amount);
        return { label, touched: m.holds.has(id) ? [m.holds.get(id)!] : [] };
      },
    },
    {
      name: "reserve-duplicate",
      weight: 5,
      async run() {
        const live = m.liveHolds();
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
        const h = m.pickResolved();
        if (!h || h.key.revoked) return null;
        // A settled, released or expired hold id never opens a hold again, and nothing changes (rate counters too).
        const amount = int(1, 1000);
        expect(m.reserve(h.key, h.id, amount)).toEqual({ ok: false, code: "HOLD_RESOLVED" });
        const err = await ledger.reserve(h.key.p, h.id, amount).catch((e) => e);
        expect(err).toBeInstanceOf(Error);
        expect((err as Error).message).toBe(`hold ${h.id} was already resolved`);
        return { label: "reserve:resolved-hold", touched: [h] };
      },
    },
    {
      name: "reserve-unknown-key",
      weight: 1,
      async run() {
        const w = pick(m.wallets);
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
        const live = m.liveHolds();
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
        const h = m.pickResolved();
        if (!h) return null;
        return { label: await settleAndCheck(h, int(0, 3_000_000)), touched: [h] };
      },
    },
    {
      name: "late-settle-after-expiry",
      weight: 3,
      async run() {
        const expired = [...m.holds.values()].filter((h) => h.state === "expired");
        if (expired.length === 0) return null;
        const h = pick(expired);
        return { label: await settleAndCheck(h, int(0, h.amount * 2)), touched: [h] };
      },
    },
    {
      name: "settle-unknown",
      weight: 1,
      async run() {
        const k = pick(m.keyList);
        const ok = await ledger.settle(k.p, newHoldId(), int(1, 1000), {
          promptTokens: 1,
          completionTokens: 1,
          costMicro: 0,
          model: "m/model",
        });
        expect(ok).toBe(false);
        return { label: "settle:unknown-hold", touched: [] };
      },
    },
    {
      name: "release",
      weight: 10,
      async run() {
        const live = m.liveHolds();
        if (live.length === 0) return null;
        const h = pick(live);
        return { label: await releaseAndCheck(h), touched: [h] };
      },
    },
    {
      name: "release-resolved",
      weight: 4,
      async run() {
        const h = m.pickResolved();
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
        const k = pick(m.keyList);
        const id = newHoldId();
        const r = await scripts.release(holdKeys({ id, key: k, amount: 0, state: "live" }), EPOCH, id, "release", MARKER_TTL_S);
        expect(r).toEqual([0, "UNKNOWN_HOLD"]);
        return { label: "release:unknown-hold", touched: [] };
      },
    },
    {
      name: "expire",
      weight: 5,
      async run() {
        const live = m.liveHolds();
        if (live.length === 0) return null;
        // Move 1..3 holds' expiry into the past (no sleeping), then let the sweeper find exactly those.
        const chosen = [...new Set(Array.from({ length: int(1, 3) }, () => pick(live)))];
        // Distinct past scores, so the sweeper (which walks by score) expires them in the chosen order.
        for (const [n, h] of chosen.entries()) expect(await redis.zadd(names.holds(h.key.p.shard), "XX", "CH", n + 1, h.id)).toBe(1);
        expect(await ledger.sweepExpired()).toBe(chosen.length);
        for (const h of chosen) m.expire(h);
        return { label: "expire:swept", touched: chosen };
      },
    },
    {
      name: "expire-live",
      weight: 2,
      async run() {
        const live = m.liveHolds();
        if (live.length === 0) return null;
        const h = pick(live);
        // The sweeper's path on a hold whose expiry has not passed never touches it.
        expect(await scripts.release(holdKeys(h), EPOCH, h.id, "expire", MARKER_TTL_S)).toEqual([0, "LIVE"]);
        expect(await ledger.sweepExpired()).toBe(0);
        return { label: "expire:still-live", touched: [h] };
      },
    },
    {
      name: "revoke",
      weight: 1,
      async run() {
        const active = m.activeKeys();
        if (active.length <= 6) return null; // keep most keys usable
        const k = pick(active);
        await redis.hset(k.p.apiKeyName, "revoked", "1");
        m.revoke(k);
        return { label: "revoke", touched: [] };
      },
    },
  ];

  steps.push(...more);
  const totalWeight = steps.reduce((s, x) => s + x.weight, 0);
  function chooseStep(): Step {
    let r = rand() * totalWeight;
    for (const s of steps) if ((r -= s.weight) < 0) return s;
    return steps.at(-1)!;
  }

  return { chooseStep, newCreditId, newHoldId };
}
