/**
 * What this process's credit leases do when a reserve is refused (docs/design.md "Credit leases", Refusals): a reserve
 * refused 402 or 429 while the process's own leases on the wallet hold the credit or rate slots it lacked gets
 * them back, and the caller (Holds.reserve) reserves once more, so one process refuses at the same point as
 * without leases.
 */
import type { KeyPrincipal, Ledger, ReserveRefusal } from "../ledger/ledger.ts";
import { log } from "../log.ts";
import type { Lease, LeaseClaim, LeaseSettings } from "./lease.ts";

/** What a give-back needs of the process's leases: Leases hands it this view of its own state. */
export interface LeaseBook {
  readonly ledger: Ledger;
  readonly settings: LeaseSettings;
  /** The process's lease on the key, if any. */
  of(keyId: number): Lease | undefined;
  /** The process's leases on the wallet's keys. */
  onWallet(wallet: string): Lease[];
  admit(p: KeyPrincipal, amount: number): LeaseClaim | undefined;
  /** The key is served by reserves for a while: a lease just given back is not reopened at once. */
  holdOff(keyId: number): void;
  /** Background work Leases.quiet() waits for. */
  track(p: Promise<void>): void;
}

/**
 * One give-back for the whole wallet, then one retry. Without it, a request the key's lease could not cover and
 * the rest of the wallet could not either was refused although the two together could, for as long as the key kept
 * being used (each attempt kept the lease from going idle); and another key's lease in the same process kept the
 * wallet's credit or slots from a key that had none.
 */
export class LeaseGiveBack {
  constructor(private readonly book: LeaseBook) {}

  /**
   * A reserve of the key was refused for the rate window while this process's lease call was in flight: that call
   * may just have taken the window's last slots for this very lease. Once it has answered, the lease admits the
   * request if it can (undefined: it cannot).
   */
  async readmit(p: KeyPrincipal, amount: number): Promise<LeaseClaim | undefined> {
    const l = this.book.of(p.keyId);
    if (!l || l.done) return undefined;
    while (l.calling && l.pending) await l.pending;
    return l.slots > 0 ? this.book.admit(p, amount) : undefined;
  }

  /**
   * A reserve of the key was refused: every lease of the wallet in this process that holds what it lacked stops
   * admitting and gives back all but what its requests in use hold, credit and rate slots, in one step (the calls
   * run side by side). The key's own lease always (it counts against the key's budget too); the wallet's other
   * keys' leases for a balance refusal if they hold credit unused, for a rate refusal if they hold slots of the
   * window. True if anything came back: the caller reserves once more. A refusal while a lease's give-back is in
   * flight waits for it (its reserve may have run before it); once answered, that lease has nothing more to give.
   * A credit refusal's reserve passed the rate limit and counted a slot, which goes back with a give-back not sent
   * yet (the key's own lease's if it can), so a retried request counts once; a refusal whose give-backs were all
   * sent already keeps it counted.
   */
  giveBack(p: KeyPrincipal, refusal: ReserveRefusal["refusal"]): Promise<boolean> {
    const credit = refusal === "INSUFFICIENT_BALANCE" || refusal === "KEY_BUDGET_EXCEEDED";
    if (!credit && refusal !== "RATE_LIMITED") return Promise.resolve(false);
    const window = this.window();
    const holds = (l: Lease) =>
      l.principal.keyId === p.keyId ||
      (refusal === "INSUFFICIENT_BALANCE" && l.cap > l.inUse) ||
      (refusal === "RATE_LIMITED" && l.window === window && l.slots > 0);
    const leases = this.book
      .onWallet(p.wallet)
      .filter((l) => l.opened && !l.giving?.answered && holds(l))
      // The key's own lease first: the refused reserve's counted slot goes back with it.
      .sort((a, b) => Number(b.principal.keyId === p.keyId) - Number(a.principal.keyId === p.keyId));
    if (leases.length === 0) return Promise.resolve(false);
    const carrier = credit ? leases.find((l) => !l.giving?.sent) : undefined;
    const results = leases.map((l) => this.giveBackLease(l, l === carrier ? 1 : 0));
    return Promise.all(results).then((r) => r.some(Boolean));
  }

  /** One lease's give-back (once per lease; a refusal while it is in flight joins it, with its counted slot if not sent yet). */
  private giveBackLease(l: Lease, counted: number): Promise<boolean> {
    if (l.giving) {
      if (!l.giving.sent) l.giving.counted += counted;
      return l.giving.result;
    }
    l.done = true;
    this.book.holdOff(l.principal.keyId);
    const g: NonNullable<Lease["giving"]> = { counted, sent: false, answered: false, result: Promise.resolve(false) };
    l.giving = g;
    g.result = (async () => {
      while (l.calling) await l.pending;
      l.calling = true;
      g.sent = true;
      const window = this.window();
      const slots = l.window === window ? l.slots : 0;
      try {
        const r = await this.book.ledger.lease(l.principal, {
          leaseId: l.id,
          target: l.inUse,
          floor: l.inUse,
          sharePerMille: this.book.settings.sharePerMille,
          least: 0,
          slots: 0,
          slotsBack: slots + g.counted,
          slotsWindow: window,
          ttlMs: this.book.settings.ttlMs,
        });
        l.slots = 0;
        if (r.ok === false && r.refusal === "HOLD_RESOLVED") return false;
        l.cap += r.locked - r.before;
        if (r.locked === 0) l.opened = false;
        return r.before > r.locked || slots > 0;
      } catch (e) {
        log.warn("lease give-back failed; the refusal stands", { lease: l.id, error: e });
        return false;
      } finally {
        l.calling = false;
        g.answered = true;
      }
    })();
    this.book.track(g.result.then(() => {}));
    return g.result;
  }

  private window(): number {
    return Math.floor(Date.now() / this.book.settings.rateLimitWindowMs);
  }
}
