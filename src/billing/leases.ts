import type { KeyPrincipal, LeaseReply, Ledger } from "../ledger/ledger.ts";
import { log } from "../log.ts";
import { boundCounters } from "../observe/bound.ts";
import { metrics } from "../observe/metrics.ts";
import { Lease, type LeaseClaim, type LeaseSettings } from "./lease.ts";

// Counted on every admission: bound once (observe/bound.ts).
const admissions = boundCounters(metrics.leaseAdmissions);
const admittedByLease = admissions("lease", () => ({ outcome: "lease" }));
const sentToReserve = admissions("reserve", () => ({ outcome: "reserve" }));
import { LeaseGiveBack } from "./leaseGiveBack.ts";

export { LEASE_DEFAULTS, type LeaseClaim, type LeaseSettings } from "./lease.ts";

// A lease that could not cover a request asks Redis again at most this often (the renew period otherwise).
const NEED_GAP_MS = 20;
// A key whose lease was refused (too small a wallet, a revoked key) is served by reserves for this long before trying again.
const RETRY_MS = 1_000;

/**
 * Credit leases (issue 23): per API key, this process holds part of the wallet's available credit and of its rate
 * window in Redis (lease-8.lua, a hold like any other), admits requests against it in memory, and charges them
 * with settle-leased-batch behind their answers. Only a request the lease cannot cover goes to Redis first (the
 * reserve), and so does every request of a wallet too small to lease. Leases are sized from the recent spend and
 * renewed in the background; one that Redis has not confirmed for `boundMs` admits nothing.
 */
export class Leases {
  private readonly byKey = new Map<number, Lease>();
  private readonly refusedUntil = new Map<number, number>();
  private readonly timer: ReturnType<typeof setInterval>;
  private readonly calls = new Set<Promise<void>>();
  private seq = 0;
  private readonly prefix = `L${process.pid.toString(36)}.${crypto.randomUUID().slice(0, 8)}.`;
  /** A reserve was refused 402/429: the wallet's leases here give back what it lacked (leaseGiveBack.ts). */
  readonly onRefusal: LeaseGiveBack;

  constructor(
    private readonly ledger: Ledger,
    private readonly s: LeaseSettings,
  ) {
    this.timer = setInterval(() => this.tick(), s.renewMs);
    this.timer.unref?.();
    this.onRefusal = new LeaseGiveBack({
      ledger,
      settings: s,
      of: (keyId) => this.byKey.get(keyId),
      onWallet: (wallet) => [...this.byKey.values()].filter((l) => l.principal.wallet === wallet),
      admit: (p, amount) => this.admit(p, amount),
      holdOff: (keyId) => this.refusedUntil.set(keyId, performance.now() + RETRY_MS),
      track: (p) => void this.track(p),
    });
  }

  /** Admits a request of `amount` under the key's lease, in memory; undefined: reserve it in Redis instead. */
  admit(p: KeyPrincipal, amount: number): LeaseClaim | undefined {
    const now = performance.now();
    let l = this.byKey.get(p.keyId);
    if (!l) {
      if ((this.refusedUntil.get(p.keyId) ?? 0) > now) return undefined;
      l = new Lease(this.prefix + (++this.seq).toString(36), p);
      this.byKey.set(p.keyId, l);
    }
    if (l.done) return undefined;
    l.lastUseAt = now;
    if (amount > l.largest) l.largest = amount;
    const window = Math.floor(Date.now() / this.s.rateLimitWindowMs);
    const usable = now - l.confirmedAt <= this.s.boundMs && l.window === window && l.slots > 0;
    if (usable && l.inUse + amount <= Math.min(l.cap, l.ceiling)) {
      l.inUse += amount;
      l.slots--;
      l.admitted++;
      if (l.inUse > l.peak) l.peak = l.inUse;
      if (now - l.lastCallAt >= this.s.renewMs) void this.call(l, now);
      admittedByLease.inc();
      return { leaseId: l.id, amount, lease: l, rateRemaining: l.rateLeft + l.slots };
    }
    if (now - l.lastCallAt >= NEED_GAP_MS) void this.call(l, now);
    sentToReserve.inc();
    return undefined;
  }

  /** The request's settle ran: `covered` of its charge came out of the lease (what the lease locks no more). */
  settled(c: LeaseClaim, covered: number): void {
    c.lease.inUse -= c.amount;
    c.lease.cap -= covered;
    c.lease.charged += covered;
  }

  /** The request charged nothing (its provider failed): its part of the lease is free again, with no Redis call. */
  giveBack(c: LeaseClaim): void {
    c.lease.inUse -= c.amount;
  }

  /** The key was revoked in this process: nothing more is admitted under its lease, at once. */
  revoked(keyId: number): void {
    const l = this.byKey.get(keyId);
    if (l) l.done = true;
  }

  /** Resolves once no lease call is in flight (tests wait for the background work with it, never by time). */
  async quiet(): Promise<void> {
    while (this.calls.size > 0) await Promise.all([...this.calls]);
  }

  /** Shutdown, after the settles in flight: gives every lease back to Redis (a killed process's leases expire instead). */
  async closeAll(): Promise<void> {
    clearInterval(this.timer);
    for (const l of this.byKey.values()) l.done = true;
    await Promise.all([...this.calls]);
    await Promise.all([...this.byKey.values()].filter((l) => l.opened).map((l) => this.close(l)));
  }

  /** Renews leases in use, closes idle and finished ones. */
  private tick(): void {
    const now = performance.now();
    for (const [keyId, l] of this.byKey) {
      if (l.calling) continue;
      if ((l.done || now - l.lastUseAt >= this.s.idleMs) && l.inUse === 0) {
        this.byKey.delete(keyId);
        if (l.opened) void this.track(this.close(l));
      } else if (now - l.lastCallAt >= this.s.renewMs) {
        // A finished lease still in use is kept alive (expiry), shrunk to what is in use, until its requests are done.
        void this.call(l, now);
      }
    }
    for (const [keyId, until] of this.refusedUntil) if (until <= now) this.refusedUntil.delete(keyId);
  }

  /** One lease-8 call in the background: size and rate slots from the last period's use. */
  private call(l: Lease, now: number): Promise<void> | undefined {
    if (l.calling) return;
    l.calling = true;
    l.lastCallAt = now;
    const window = Math.floor(Date.now() / this.s.rateLimitWindowMs);
    const target = l.done ? l.inUse : Math.max(this.s.leastHolds * l.largest, 2 * (l.peak + l.charged));
    const wantSlots = l.done ? 0 : Math.max(4, 2 * l.admitted);
    const ask = {
      leaseId: l.id,
      target,
      floor: l.inUse,
      sharePerMille: this.s.sharePerMille,
      least: this.s.leastHolds * l.largest,
      slots: l.window === window ? Math.max(0, wantSlots - l.slots) : wantSlots,
      slotsBack: 0,
      slotsWindow: l.window,
      ttlMs: this.s.ttlMs,
    };
    l.ceiling = Math.max(ask.floor, target);
    l.peak = l.inUse;
    l.charged = 0;
    l.admitted = 0;
    l.pending = this.ledger
      .lease(l.principal, ask)
      .then((r) => this.apply(l, r, now))
      .catch((e: unknown) => log.warn("lease call failed; requests reserve in Redis until one succeeds", { lease: l.id, error: e }))
      .finally(() => {
        l.calling = false;
        l.ceiling = Infinity;
        l.pending = undefined;
      });
    void this.track(l.pending);
    return l.pending;
  }

  private track(p: Promise<void>): Promise<void> {
    this.calls.add(p);
    void p.finally(() => this.calls.delete(p));
    return p;
  }

  private apply(l: Lease, r: LeaseReply, sentAt: number): void {
    if (!r.ok && r.refusal === "HOLD_RESOLVED") {
      // The sweeper expired it (this process could not reach Redis for a lease lifetime): it covers nothing now.
      l.done = true;
      l.cap = 0;
      return;
    }
    // Redis locked nothing for it when the call ran: what this process counted is gone (its charges took it, or
    // Redis lost the marker), so the lock is what the call left, not the old count plus it.
    l.cap = r.before === 0 ? r.locked : l.cap + r.locked - r.before;
    if (r.before > 0 || r.locked > 0) l.opened = true;
    if (!r.ok) {
      l.done = true;
      this.refusedUntil.set(l.principal.keyId, performance.now() + RETRY_MS);
      return;
    }
    if (r.locked === 0) {
      // Too small a wallet to lease (or nothing left): served by reserves for a while.
      l.done = true;
      this.refusedUntil.set(l.principal.keyId, performance.now() + RETRY_MS);
      return;
    }
    l.opened = true;
    if (r.window !== l.window) l.slots = 0;
    l.slots += r.slots;
    l.window = r.window;
    l.rateLeft = r.rateLeft;
    l.confirmedAt = sentAt;
  }

  /** Gives the lease back (what is in use stays locked until its settles), with its unused rate slots. */
  private async close(l: Lease): Promise<void> {
    try {
      const r = await this.ledger.lease(l.principal, {
        leaseId: l.id,
        target: 0,
        floor: l.inUse,
        sharePerMille: this.s.sharePerMille,
        least: 0,
        slots: 0,
        slotsBack: l.slots,
        slotsWindow: l.window,
        ttlMs: this.s.ttlMs,
      });
      if (r.ok || r.refusal === "UNAUTHORIZED") l.cap += r.locked - r.before;
      else l.cap = 0;
      l.slots = 0;
    } catch (e) {
      log.warn("lease close failed; the sweeper frees it when it expires", { lease: l.id, error: e });
    }
  }
}
