/**
 * The credit-lease steps of the ledger model test's workload: lease-8 calls (open, resize, renew, close, with
 * random targets, floors, shares and `least`), leased charges of random amounts with random held parts (alone,
 * repeated, under unknown leases, and in bursts the batcher sends as batches beside lease calls), the sweeper
 * expiring leases, and budgets changed under them. The model (leases.ts) says what each must answer.
 */
import { expect } from "bun:test";
import type { LeaseReply } from "../../src/ledger/ledger.ts";
import type { LeaseAskM, LeaseModel } from "./leases.ts";
import type { KeyM, LeaseM, ReferenceModel } from "./reference.ts";
import { evalCalls, HOLD_TTL_MS, type LedgerUnderTest, type randomFrom, type Step, type StepOutcome } from "./workload.ts";

/** The lease steps over the models and the ledger. */
export function leaseWorkload(
  m: ReferenceModel,
  lm: LeaseModel,
  sut: LedgerUnderTest,
  random: ReturnType<typeof randomFrom>,
  seed: number,
) {
  const { redis, ledger, names } = sut;
  const { int, pick, chance } = random;
  let seq = 0;
  const newLeaseId = () => `L${seed.toString(36)}.${++seq}`;
  const newChargeId = () => `lc-${seed}-${++seq}`;
  const live = (f: (l: LeaseM) => boolean = () => true) => lm.pickLease(pick, (l) => l.state === "live" && f(l));

  /** A random ask: shrink, keep, grow or ask far too much; a floor sometimes above the lock; any share. */
  function randomAsk(l?: LeaseM): LeaseAskM {
    const cur = l?.amount ?? 0;
    const target = l ? pick([0, int(0, cur), cur, cur + int(1, 4_000_000), int(0, 40_000_000)]) : chance(0.9) ? int(1, 4_000_000) : 0;
    const floor = chance(0.5) ? 0 : int(0, cur + 200_000);
    const share = pick([1000, 500, int(0, 1000)]);
    const least = chance(0.5) ? 0 : int(0, Math.ceil(target * 1.2));
    return { target, floor, share, least, slots: int(0, 8) };
  }

  /** The model calls now (so a burst's next plan sees it); the check compares the ledger's answer. */
  function planLease(k: KeyM, id: string, a: LeaseAskM): (run: Promise<LeaseReply>) => Promise<string> {
    const available = m.balanceOf(k.wallet) - m.lockedOfWallet(k.wallet);
    const budgetLeft = k.budget === null ? Infinity : k.budget - k.spent - m.lockedOfKey(k);
    const { label, ...want } = lm.lease(k, id, a);
    return async (run) => {
      const got = await run;
      expect({ lease: id, ...got }).toMatchObject({ lease: id, ...want });
      // Whatever the model says: a lease grows only out of what was outside every lock when it was granted.
      if ("locked" in got && got.locked > got.before) {
        expect(got.ok).toBe(true);
        expect(got.locked - got.before).toBeLessThanOrEqual(Math.min(available, budgetLeft));
      }
      return label;
    };
  }

  function callLease(k: KeyM, id: string, a: LeaseAskM): Promise<LeaseReply> {
    const window = Math.floor(Date.now() / 60_000);
    const ask = { leaseId: id, sharePerMille: a.share, slotsBack: int(0, 3), slotsWindow: window, ttlMs: HOLD_TTL_MS, ...a };
    return ledger.lease(k.p, ask);
  }

  async function leaseStep(k: KeyM, id: string, a: LeaseAskM): Promise<StepOutcome> {
    const label = await planLease(k, id, a)(callLease(k, id, a));
    const l = m.leases.get(id);
    return { label, touched: [], leases: l ? [l] : [] };
  }

  /** Like planLease, for one charge of a request admitted under lease `leaseId` (the model's lease, if any). */
  function planSettleLeased(k: KeyM, leaseId: string, chargeId: string, charge: number, held: number) {
    const usage = { pt: int(0, 5000), ct: int(0, 5000), cost: int(0, charge) };
    const details = { promptTokens: usage.pt, completionTokens: usage.ct, costMicro: usage.cost, model: "m/model" };
    const want = lm.settleLeased(m.leases.get(leaseId), chargeId, charge, held, usage);
    const run = ledger.settleLeased(k.p, chargeId, charge, details, { id: leaseId, held });
    return run.then((got) => {
      expect({ charge: chargeId, ...got }).toEqual({ charge: chargeId, outcome: want.outcome, covered: want.covered });
      return want.label;
    });
  }

  /** A charge under a lease of `l`: what the request held (sometimes more than the lease has), its charge (sometimes more). */
  function randomCharge(l: LeaseM): [charge: number, held: number] {
    // Sometimes nothing held (a request the lease could not cover, charged under it all the same).
    if (chance(0.1)) return [int(0, 1_000), 0];
    const held = int(0, Math.max(1, Math.min(l.amount + 1_000, 3_000_000)));
    return [chance(0.8) ? int(0, held) : int(held + 1, 2 * held + 1_000), held];
  }

  /** Leased charges and lease calls of one wallet, not awaited one by one: the batcher sends the charges as batches, each lease call after what is queued. */
  async function burst(): Promise<StepOutcome> {
    const w = pick(m.wallets);
    const mine = (f: (l: LeaseM) => boolean) => lm.pickLease(pick, (l) => l.key.wallet === w && f(l));
    const checks: Promise<string>[] = [];
    const leases = new Set<LeaseM>();
    const charges: string[] = [];
    const before = await evalCalls(redis);
    let leaseCalls = 0;
    for (let i = int(2, 12); i > 0; i--) {
      const l = chance(0.8) ? mine((x) => x.state === "live") : mine(() => true);
      if (!l) continue;
      leases.add(l);
      if (chance(0.2)) {
        const a = randomAsk(l);
        checks.push(planLease(l.key, l.id, a)(callLease(l.key, l.id, a)));
        leaseCalls++;
        continue;
      }
      // Sometimes a charge id of this burst again: the second is a no-op in the same batch or the next.
      const id = chance(0.15) && charges.length > 0 ? pick(charges) : newChargeId();
      const [charge, held] = randomCharge(l);
      charges.push(id);
      checks.push(planSettleLeased(l.key, l.id, id, charge, held));
    }
    const labels = await Promise.all(checks);
    if (labels.length === 0) return null;
    // Charges go as batches: the first alone, the ones queued behind it with the next lease call (which flushes
    // them first) or when it answers.
    expect(await evalCalls(redis)).toBeLessThanOrEqual(before + 2 * leaseCalls + 2);
    return { label: labels.length >= 3 ? "burst:batched-leased" : "burst:small", touched: [], labels, leases: [...leases], charges };
  }

  async function setBudget(k: KeyM, budget: number | null): Promise<void> {
    await redis.hset(k.p.apiKeyName, "budget", budget === null ? "" : String(budget));
    lm.setBudget(k, budget);
  }

  const steps: Step[] = [
    {
      name: "lease-open",
      weight: 6,
      async run() {
        const active = m.activeKeys();
        const k = chance(0.9) && active.length > 0 ? pick(active) : pick(m.keyList);
        return leaseStep(k, newLeaseId(), randomAsk());
      },
    },
    {
      name: "lease-resize",
      weight: 10,
      async run() {
        // Now and then a lease of a revoked key (its owner has not heard yet): it only shrinks or closes.
        const l = (chance(0.3) && live((x) => x.key.revoked)) || live();
        return l ? leaseStep(l.key, l.id, randomAsk(l)) : null;
      },
    },
    {
      name: "lease-close",
      weight: 3,
      async run() {
        const l = live();
        if (!l) return null;
        // A close, or a close that keeps what requests in flight may still need.
        return leaseStep(l.key, l.id, { target: 0, floor: chance(0.7) ? 0 : int(1, l.amount + 1), share: 1000, least: 0, slots: 0 });
      },
    },
    {
      name: "lease-resolved",
      weight: 2,
      async run() {
        const l = lm.pickLease(pick, (x) => x.state !== "live");
        return l ? leaseStep(l.key, l.id, randomAsk()) : null;
      },
    },
    {
      name: "settle-leased",
      weight: 14,
      async run() {
        const l = chance(0.8) ? live() : lm.pickLease(pick, () => true);
        if (!l) return null;
        const id = newChargeId();
        const label = await planSettleLeased(l.key, l.id, id, ...randomCharge(l));
        return { label, touched: [], leases: [l], charges: [id] };
      },
    },
    {
      name: "settle-leased-repeat",
      weight: 2,
      async run() {
        if (lm.charged.size === 0) return null;
        const [id, l] = pick([...lm.charged.entries()]);
        const label = await planSettleLeased(l.key, l.id, id, int(0, 1_000_000), int(0, 1_000_000));
        return { label, touched: [], leases: [l], charges: [id] };
      },
    },
    {
      name: "settle-leased-unknown",
      weight: 1,
      async run() {
        const k = pick(m.keyList);
        const id = newChargeId();
        const label = await planSettleLeased(k, newLeaseId(), id, int(1, 1000), int(0, 1000));
        return { label, touched: [], charges: [id] };
      },
    },
    {
      name: "lease-expire",
      weight: 2,
      async run() {
        const all = m.liveLeases();
        if (all.length === 0) return null;
        const chosen = [...new Set(Array.from({ length: int(1, 2) }, () => pick(all)))];
        // Past expiries, distinct, so the sweeper (which walks by score) expires them in this order.
        for (const [n, l] of chosen.entries()) expect(await redis.zadd(names.holds(l.key.p.shard), "XX", "CH", n + 1, l.id)).toBe(1);
        expect(await ledger.sweepExpired()).toBe(chosen.length);
        for (const l of chosen) lm.expire(l);
        return { label: "expire:lease-swept", touched: [], leases: chosen };
      },
    },
    {
      name: "budget",
      weight: 3,
      async run() {
        // Mostly a key whose lease locks something (a key without a budget gets one): the lease's next call must
        // give up what the budget no longer covers.
        const open = live((x) => x.amount > 0 && !x.key.revoked);
        const l = chance(0.7) && open ? open : undefined;
        const k = l?.key ?? pick(m.keyList.filter((x) => x.budget !== null));
        const [was, used] = [k.budget, k.spent + m.lockedOfKey(k)];
        // Lowered: below what the key used, by part of its lease's lock (the lease shrinks) or by anything.
        const lower = l && chance(0.7) ? used - int(1, Math.max(1, l.amount)) : int(0, used);
        const budget = Math.max(0, chance(l ? 0.7 : 0.5) ? lower : used + int(0, 10_000_000));
        await setBudget(k, budget);
        // Then the lease's renew, as its owner sends it within its period.
        const renew = (x: LeaseM) => ({ ...randomAsk(x), target: x.amount + int(0, 1_000_000), floor: chance(0.7) ? 0 : int(0, x.amount) });
        const next = l ? await leaseStep(k, l.id, renew(l)) : null;
        // Mostly set back after (an operator's correction), so that budgets do not starve the other steps' reserves.
        if (chance(0.8)) await setBudget(k, was);
        const label = budget < used ? "budget:below-use" : "budget:raised";
        return { label, labels: next ? [next.label] : [], touched: [], leases: next?.leases };
      },
    },
    {
      name: "revoke-under-lease",
      weight: 2,
      async run() {
        const l = live((x) => !x.key.revoked);
        if (!l || m.activeKeys().length <= 5) return null; // keep half the keys usable
        await redis.hset(l.key.p.apiKeyName, "revoked", "1");
        m.revoke(l.key);
        // Its owner's next renew (or one in flight): no growth, no slots, UNAUTHORIZED.
        return leaseStep(l.key, l.id, randomAsk(l));
      },
    },
    { name: "lease-burst", weight: 6, run: burst },
  ];
  return { steps };
}
