/**
 * Seeded random test of the Redis Lua ledger against an in-memory reference model (TigerBeetle style): the model
 * is test/model/reference.ts (credit leases: leases.ts), the workload (random operations on both)
 * test/model/workload.ts (leases: leaseWorkload.ts). Every step runs one ledger operation on a private redis-server
 * and the same operation on the model, then this file compares all of Redis' ledger state with the model and checks
 * the ledger's invariants: locked = Σ live holds and leases (wallet and key), balance = credits − charges, a lease
 * grows only out of what was available, no lease resolved twice; every AUDIT_EVERY steps the audit's own
 * comparison (src/audit) finds no difference between Redis and the model's books.
 *
 * The seed is printed; replay a failure with LEDGER_SEED=<seed> bun test test/ledger.model.test.ts.
 * LEDGER_STEPS overrides the number of steps.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { Redis } from "ioredis";
import { keyStateFields } from "../src/ledger/apiKeyState.ts";
import { Ledger } from "../src/ledger/ledger.ts";
import { RedisNames } from "../src/ledger/names.ts";
import { LedgerScripts } from "../src/ledger/scripts.ts";
import { privateRedis } from "./helpers/services.ts";
import { auditDifferences } from "./model/audit.ts";
import { leaseModel } from "./model/leases.ts";
import { leaseWorkload } from "./model/leaseWorkload.ts";
import { type HoldM, type LeaseM, referenceModel } from "./model/reference.ts";
import { EPOCH, HOLD_TTL_MS, ledgerWorkload, randomFrom } from "./model/workload.ts";

const SEED = process.env.LEDGER_SEED ? Number(process.env.LEDGER_SEED) >>> 0 : (Date.now() ^ (Math.random() * 2 ** 32)) >>> 0;
const STEPS = Number(process.env.LEDGER_STEPS ?? 2000);
const random = randomFrom(SEED);
const { int } = random;
const names = new RedisNames(4);
const m = referenceModel(names, random.pick);
const lm = leaseModel(m);
// The audit's comparison runs this often (and at the end): it reads every shard's whole outbox.
const AUDIT_EVERY = 50;

let server: Awaited<ReturnType<typeof privateRedis>>;
let redis: Redis;
let scripts: LedgerScripts;
let ledger: Ledger;
let workload: ReturnType<typeof ledgerWorkload>;

beforeAll(async () => {
  server = await privateRedis();
  redis = new Redis(server.socket);
  scripts = await LedgerScripts.connect(server.socket);
  ledger = new Ledger(redis, scripts, names, { rateLimitRequests: 1e9, rateLimitWindowMs: 60_000, holdTtlMs: HOLD_TTL_MS });
  for (const s of names.allShards()) await redis.set(names.fence(s), EPOCH);
  await ledger.fence.readAll();
  // Two keys per wallet, one of them with a budget; written as KeyService.create writes them.
  let id = 1;
  for (const w of m.wallets) {
    for (const budget of [null, int(1, 20) * 500_000]) {
      const p = ledger.principal(id, w.addr);
      await redis.hset(p.apiKeyName, keyStateFields({ revoked: false, budget }));
      m.keyList.push({ id, wallet: w, p, revoked: false, budget, spent: 0, requests: 0, pt: 0, ct: 0, revenue: 0 });
      id++;
    }
  }
  const sut = { redis, scripts, ledger, names };
  workload = ledgerWorkload(m, sut, random, SEED, leaseWorkload(m, lm, sut, random, SEED).steps);
});
afterAll(async () => {
  redis?.disconnect();
  scripts?.close();
  await server?.stop();
});

/** Compares every piece of ledger state in Redis with the model, and checks the invariants against Redis. */
async function checkAll(touched: HoldM[], leases: LeaseM[] = [], charges: string[] = []) {
  const p = redis.pipeline();
  for (const w of m.wallets) p.hmget(names.wallet(w.shard, w.addr), "balance", "locked");
  for (const k of m.keyList)
    p.hmget(k.p.apiKeyName, "revoked", "budget", "spent", "locked", "requests", "prompt_tokens", "completion_tokens", "revenue");
  for (const s of names.allShards()) p.zcard(names.holds(s)).xrange(names.outbox(s), "-", "+");
  for (const h of [...touched, ...leases]) p.get(names.holdMarker(h.key.p.shard, h.id)).zscore(names.holds(h.key.p.shard), h.id);
  const chargeShard = (id: string) => (lm.charged.get(id)?.key ?? m.keyList[0]!).p.shard;
  for (const id of charges) p.get(names.holdMarker(chargeShard(id), id));
  const res = (await p.exec())!.map(([err, v]) => {
    if (err) throw err;
    return v;
  });
  let i = 0;
  const num = (x: string | null) => (x === null ? 0 : Number(x));

  for (const w of m.wallets) {
    const [balance, locked] = res[i++] as (string | null)[];
    // balance = Σ credits − Σ charges; locked = Σ live holds and leases of the wallet
    expect({ wallet: w.addr, balance: num(balance!), locked: num(locked!) }).toEqual({
      wallet: w.addr,
      balance: w.credits - w.charges,
      locked: m.lockedOfWallet(w),
    });
  }
  for (const k of m.keyList) {
    const [revoked, budget, spent, locked, requests, pt, ct, revenue] = res[i++] as (string | null)[];
    expect({
      key: k.id,
      revoked,
      budget,
      spent: num(spent!),
      locked: num(locked!),
      requests: num(requests!),
      pt: num(pt!),
      ct: num(ct!),
      revenue: num(revenue!),
    }).toEqual({
      key: k.id,
      revoked: k.revoked ? "1" : "0",
      budget: k.budget === null ? "" : String(k.budget),
      spent: k.spent,
      locked: m.lockedOfKey(k),
      requests: k.requests,
      pt: k.pt,
      ct: k.ct,
      revenue: k.revenue,
    });
  }
  for (const s of names.allShards()) {
    const live = [...m.liveHolds(), ...m.liveLeases()].filter((h) => h.key.p.shard === s).length;
    const zcard = res[i++];
    // Events, not entries: a settle batch's charges share one entry.
    const outbox = (res[i++] as [string, string[]][]).reduce((n, [, f]) => n + (JSON.parse(`[${f[1]!}]`) as unknown[]).length, 0);
    expect({ shard: s, zcard, outbox }).toEqual({ shard: s, zcard: live, outbox: m.events.get(s)!.length });
  }
  for (const h of [...touched, ...leases]) {
    const marker = res[i++];
    const score = res[i++];
    expect({ hold: h.id, marker, inZset: score !== null }).toEqual({
      hold: h.id,
      marker: h.state === "live" ? `live|${h.amount}|${h.key.wallet.addr}|${h.key.id}` : h.state,
      inZset: h.state === "live",
    });
  }
  // A leased charge's id is posted once (its marker), an unknown lease's never.
  for (const id of charges) expect({ charge: id, marker: res[i++] }).toEqual({ charge: id, marker: lm.charged.has(id) ? "settled" : null });
}

/** The interesting paths a run of 2000 steps or more must take (it runs on, up to 4× its steps, until it has). */
const REQUIRED = [
  "credit:applied",
  "credit:repeat-noop",
  "reserve:held",
  "reserve:duplicate",
  "reserve:UNAUTHORIZED",
  "reserve:KEY_BUDGET_EXCEEDED",
  "reserve:INSUFFICIENT_BALANCE",
  "settle:posted",
  "settle:late-after-expiry",
  "settle:noop-settled",
  "settle:noop-released",
  "release:released",
  "release:noop-settled",
  "release:noop-released",
  "release:noop-expired",
  "expire:swept",
  "expire:still-live",
  "burst:batched-reserves",
  "burst:batched-settles",
  "burst:batched-mixed",
  "burst:batched-leased",
  "lease:opened",
  "lease:not-opened",
  "lease:grown",
  "lease:shrunk",
  "lease:shrunk-overdrawn",
  "lease:floor-kept",
  "lease:same",
  "lease:closed",
  "lease:HOLD_RESOLVED",
  "settle-leased:covered-all",
  "settle-leased:covered-part",
  "settle-leased:uncovered",
  "settle-leased:after-released",
  "settle-leased:after-expired",
  "settle-leased:repeat",
  "settle-leased:unknown-lease",
  "expire:lease-swept",
  "budget:below-use",
  "failover:served-first",
  "failover:served-fallback",
  "failover:all-failed",
  "cached:settled-with-breakpoint",
  "cached:settled-reads-only",
];

test(`random ledger operations match the reference model (seed ${SEED}, ${STEPS} steps)`, async () => {
  console.log(`ledger model: LEDGER_SEED=${SEED} LEDGER_STEPS=${STEPS}`);
  // Start with some money everywhere so most reserves pass.
  for (const w of m.wallets) {
    const amount = int(1_000_000, 10_000_000);
    const id = workload.newCreditId();
    expect(await ledger.credit(w.addr, id, amount)).toEqual(m.credit(w, id, amount));
  }
  await checkAll([]);

  const seen = new Map<string, number>();
  // A rare path (e.g. a charge after its lease expired) can miss 2000 steps of some seed: the run goes on until
  // each was taken, so the check below never depends on luck.
  // A lease call of a revoked key that found the lease open (it shrank, closed or kept its lock, never grew).
  const revokedLeaseCallSeen = () =>
    [...seen.keys()].some((l) => l.startsWith("lease:UNAUTHORIZED-") && l !== "lease:UNAUTHORIZED-not-opened");
  const unseen = () => STEPS >= 2000 && (REQUIRED.some((label) => !seen.has(label)) || !revokedLeaseCallSeen());
  for (let n = 1; n <= STEPS || (unseen() && n <= 4 * STEPS);) {
    const step = workload.chooseStep();
    let outcome;
    try {
      outcome = await step.run();
      if (outcome) await checkAll(outcome.touched, outcome.leases, outcome.charges);
      if (outcome && n % AUDIT_EVERY === 0) expect(await auditDifferences(m, { redis, scripts, ledger, names })).toEqual([]);
    } catch (e) {
      throw new Error(`LEDGER_SEED=${SEED}: step ${n} (${step.name}) diverged from the model: ${(e as Error).message}`, { cause: e });
    }
    if (!outcome) continue; // not applicable now (e.g. no live hold): draw again
    // A burst's items count as what each of them did.
    for (const label of [outcome.label, ...(outcome.labels ?? [])]) seen.set(label, (seen.get(label) ?? 0) + 1);
    n++;
  }
  console.log("outcomes:", Object.fromEntries([...seen.entries()].sort()));

  // The interesting paths all happened.
  if (STEPS >= 2000) {
    for (const label of REQUIRED) {
      expect({ label, seen: (seen.get(label) ?? 0) > 0 }).toEqual({ label, seen: true });
    }
    expect(revokedLeaseCallSeen()).toBe(true);
  }

  // The outbox holds exactly one event per state-changing settle / release / expire, in order, per shard (a settle
  // batch's events share one entry).
  const perHold = [...m.holds.values()].reduce(
    (n, h) => n + (h.state === "live" ? 0 : 1) + (h.state === "settled" && h.expiredOnce ? 1 : 0),
    0,
  );
  expect(m.changes.settle + m.changes.release + m.changes.expire).toBe(perHold);
  let eventsTotal = 0;
  const resolutions = new Map<string, number>(); // lease id → its release and expire events in Redis's outbox
  for (const s of names.allShards()) {
    const xlen = await redis.xlen(names.outbox(s));
    const entries = await redis.xrange(names.outbox(s), "-", "+");
    expect(entries.length).toBe(xlen);
    const asEvents = entries.flatMap(([, fields]) => {
      // One field 'e': the entry's events as JSON objects, comma-separated; the model keeps every value as the
      // string it was given as.
      expect(fields[0]).toBe("e");
      return (JSON.parse(`[${fields[1]!}]`) as Record<string, string | number>[]).map((e) => {
        const f: Record<string, string> = {};
        for (const [k, v] of Object.entries(e)) f[k] = String(v);
        expect(Number(f.at)).toBeGreaterThan(1_600_000_000_000);
        expect(Number(f.at)).toBeLessThan(4_000_000_000_000);
        delete f.at;
        return f;
      });
    });
    eventsTotal += asEvents.length;
    for (const e of asEvents)
      if (e.type !== "charge" && m.leases.has(e.hold!)) resolutions.set(e.hold!, (resolutions.get(e.hold!) ?? 0) + 1);
    expect(asEvents).toEqual(m.events.get(s)! as unknown as Record<string, string>[]);
  }
  expect(eventsTotal).toBe(
    m.changes.settle + m.changes.release + m.changes.expire + lm.counts.charge + lm.counts.release + lm.counts.expire,
  );
  // No lease was closed or expired twice (one event each), nor reopened after (the model answers HOLD_RESOLVED).
  expect([...resolutions.values()].filter((n) => n !== 1)).toEqual([]);
  expect(resolutions.size).toBe(lm.counts.release + lm.counts.expire);
  expect(await auditDifferences(m, { redis, scripts, ledger, names })).toEqual([]);
  expect(m.changes.settle).toBe((seen.get("settle:posted") ?? 0) + (seen.get("settle:late-after-expiry") ?? 0));
  expect(m.changes.release).toBe(seen.get("release:released") ?? 0);
}, 120_000);
