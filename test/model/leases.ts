/**
 * The reference model of credit leases (lease-8.lua, settle-leased-batch.lua), over the ledger's reference model
 * (reference.ts): what each lease call and each leased charge must answer and do, stated from the scripts' headers.
 * A lease is a lock like a hold's (the reference model's locked sums count it); the rate limit is out of reach here
 * (the model test's limit is 10^9: every slot asked of an open lease of an active key is granted).
 */
import type { KeyM, LeaseM, ReferenceModel, SettleUsage } from "./reference.ts";

/** One lease-8 call's ask, as the Ledger takes it (rate slots given back do not change what the model sees). */
export interface LeaseAskM {
  target: number;
  floor: number;
  share: number;
  least: number;
  slots: number;
}

/** What lease-8 must answer, and why, as a label of the path it took. */
export type ExpectedLease = { label: string } & (
  | { ok: true; locked: number; before: number; available: number; slots: number }
  | { ok: false; refusal: "UNAUTHORIZED"; locked: number; before: number }
  | { ok: false; refusal: "HOLD_RESOLVED" }
);

/** Leases in the model: the calls, the leased charges, the sweeper; with the counts of events they caused. */
export function leaseModel(m: ReferenceModel) {
  const charged = new Map<string, LeaseM>(); // leased charge id → the lease it was charged under
  const counts = { release: 0, expire: 0, charge: 0 };
  const resolved = new Map<string, number>(); // lease id → times it was closed or expired

  function resolve(l: LeaseM, state: "released" | "expired"): void {
    m.events.get(l.key.p.shard)!.push(m.resolution(l, state === "released" ? "release" : "expire"));
    l.state = state;
    counts[state === "released" ? "release" : "expire"]++;
    resolved.set(l.id, (resolved.get(l.id) ?? 0) + 1);
  }

  /**
   * lease-8: a resolved id is refused; otherwise the lock moves to the target, shrinking by what the wallet or the
   * key's budget lacks (overdrawn) but never below the floor (at most the lock), and growing only for an active
   * key, out of what is left outside every lock (of the wallet, or of the key's budget when that is less), up to its
   * share of (that + its own lock). A lease not open
   * yet opens only with `least`; one brought to 0 closes (released, one event).
   */
  function lease(k: KeyM, id: string, a: LeaseAskM): ExpectedLease {
    const l = m.leases.get(id);
    if (l && l.state !== "live") return { ok: false, refusal: "HOLD_RESOLVED", label: "lease:HOLD_RESOLVED" };
    const before = l?.amount ?? 0;
    const available = m.balanceOf(k.wallet) - m.lockedOfWallet(k.wallet);
    const budgetLeft = k.budget === null ? Infinity : k.budget - k.spent - m.lockedOfKey(k);
    const left = Math.min(available, budgetLeft);
    const active = !k.revoked;
    let locked = Math.min(a.target, before);
    let label = a.target < before ? "shrunk" : "same";
    if (left < 0 && before + left < locked) [locked, label] = [before + left, "shrunk-overdrawn"];
    if (active && a.target > before && left > 0) {
      const room = Math.min(left, Math.floor(((left + before) * a.share) / 1000) - before);
      if (room > 0) [locked, label] = [Math.min(a.target, before + room), "grown"];
    }
    const floor = Math.min(a.floor, before);
    if (floor > locked) [locked, label] = [floor, "floor-kept"];
    if (!l && locked < a.least) locked = 0;
    if (!l) label = locked > 0 ? "opened" : "not-opened";
    else if (locked === 0) label = "closed";

    if (locked > 0 && !l) m.leases.set(id, { id, key: k, amount: locked, state: "live" });
    else if (locked > 0) l!.amount = locked;
    else if (l) {
      l.amount = before;
      resolve(l, "released");
    }
    if (!active) return { ok: false, refusal: "UNAUTHORIZED", locked, before, label: `lease:UNAUTHORIZED-${label}` };
    const slots = locked > 0 ? a.slots : 0;
    return { ok: true, locked, before, available: available - (locked - before), slots, label: `lease:${label}` };
  }

  /**
   * settle-leased-batch: a charge id posts once; under a live lease the lock gives up min(charge, held, lock);
   * under a closed or expired one nothing (the charge is still posted); an unknown lease changes nothing.
   */
  function settleLeased(l: LeaseM | undefined, chargeId: string, charge: number, held: number, usage: SettleUsage) {
    if (charged.has(chargeId)) return { outcome: "settled", covered: 0, label: "settle-leased:repeat" } as const;
    if (!l) return { outcome: "UNKNOWN_HOLD", covered: 0, label: "settle-leased:unknown-lease" } as const;
    const covered = l.state === "live" ? Math.min(charge, held, l.amount) : 0;
    l.amount -= covered;
    charged.set(chargeId, l);
    counts.charge++;
    m.postCharge(l.key, chargeId, charge, usage);
    const label =
      l.state !== "live"
        ? `after-${l.state}`
        : covered === charge
          ? charge === 0
            ? "nothing"
            : "covered-all"
          : covered > 0
            ? "covered-part"
            : "uncovered";
    return { outcome: "charged", covered, label: `settle-leased:${label}` } as const;
  }

  /** The sweeper expires a live lease whose time passed: its whole lock comes back. */
  function expire(l: LeaseM): void {
    resolve(l, "expired");
  }

  /** An operator sets a key's budget (lower than it spent and locks, or higher). */
  function setBudget(k: KeyM, budget: number | null): void {
    k.budget = budget;
  }

  const pickLease = (pick: <T>(xs: readonly T[]) => T, f: (l: LeaseM) => boolean) => {
    const xs = [...m.leases.values()].filter(f);
    return xs.length === 0 ? undefined : pick(xs);
  };

  return { charged, counts, resolved, lease, settleLeased, expire, setBudget, pickLease };
}

/** The lease model's state and operations. */
export type LeaseModel = ReturnType<typeof leaseModel>;
