import { deadline, withDeadline } from "../deadline.ts";
import { ApiError } from "../errors.ts";
import { LedgerRebuilding } from "../ledger/fence.ts";
import type { ChargeDetails, KeyPrincipal, Ledger, ReserveOutcome, SettleOutcome } from "../ledger/ledger.ts";
import { log } from "../log.ts";
import type { RequestTrace } from "../observe/trace.ts";
import { DependencyDown, isRedisDown } from "../outage.ts";
import type { Model } from "../providers/catalog.ts";
import type { Usage } from "../providers/types.ts";
import type { PendingSettle, PendingSettles } from "../store/pendingSettles.ts";
import type { ReserveBound } from "../tariff/index.ts";
import type { LeaseClaim, Leases } from "./leases.ts";
import { checkHoldOverrun } from "./overruns.ts";
import type { RecentCharges } from "./recentCharges.ts";
import { billedMicro, costMicro } from "../tariff/index.ts";
import { refusalError } from "./refusals.ts";

/** What a hold's settle needs of its request: who pays, which hold, the model's prices, what the hold covers. */
export interface HeldCall {
  principal: KeyPrincipal;
  holdId: string;
  model: Model;
  bound: ReserveBound;
  /** The access-log line and metrics of the request: the charge is written there. */
  trace: RequestTrace;
  /** Admitted under this process's credit lease (holdId is then the request's own charge id, with no hold of its own). */
  lease?: LeaseClaim;
}

// A reserve takes well under a millisecond in Redis; one that has not answered in this long is not coming soon.
const RESERVE_DEADLINE_MS = 2_000;

// A settle keeps trying for about a minute (a late settle still charges after the sweeper expired the hold), then
// goes to Postgres (pending_settles) for the repair job.
const SETTLE_ATTEMPTS = 35;
const SETTLE_ATTEMPT_MS = 2_000;
const RELEASE_ATTEMPTS = 5;
const STILL_FAILING_AT = 4;
// How long a release behind a lost reserve reply waits for that reserve's own outcome before it goes anyway (the
// reserve is then stuck behind an outage; should it run later, the sweeper expires its hold with its lifetime).
const RESERVE_OUTCOME_WAIT_MS = 30_000;

/** A settle running behind its answer: what is kept should it fail, and its attempts so far. */
interface Settling {
  keep: PendingSettle;
  attempt: number;
}

/**
 * A request's two Redis calls, as one hold's life: the reserve (under a deadline, refused in the spec's words), then
 * the settle or the release, durable: settles run behind their answers with retries and a deadline per attempt, a
 * settle that keeps failing goes to Postgres, and shutdown can wait for (or keep) what is in flight.
 */
export class Holds {
  /** Settles running behind their answers, with what is needed to keep them if the process must stop first. */
  private readonly settling = new Map<Settling, PendingSettle>();
  /** Told once no settle runs (idle). */
  private drained: (() => void)[] = [];
  /** Releases of holds whose reserve reply was lost. */
  private readonly releasing = new Set<Promise<void>>();

  constructor(
    private readonly ledger: Ledger,
    private readonly pending: PendingSettles,
    /** Credit leases (CREDIT_LEASES=on): most requests are admitted in memory, without a reserve. */
    readonly leases?: Leases,
    /** On a Redis Cluster: the charges each master acknowledged last, posted again should it fail over. */
    private readonly recent?: RecentCharges,
  ) {}

  /**
   * Holds `amount` for the request, answering 503 fast when Redis cannot: at once while the ledger's connection is
   * down (nothing is sent, so nothing is held), and after RESERVE_DEADLINE_MS when Redis does not answer. A reserve
   * whose reply was lost (connection dropped, deadline) may still open its hold, now or when a queued command runs
   * on reconnect, or once a cluster's failover is over: a release by its hold id follows its outcome, behind the
   * answer; should that fail too, the sweeper expires the hold. A refusal is the spec's 401/402/429.
   */
  async reserve(principal: KeyPrincipal, holdId: string, amount: number): Promise<{ rateRemaining: number; lease?: LeaseClaim }> {
    if (!this.ledger.connected) throw ApiError.unavailable(1);
    // A key with its own requests per minute is counted in Redis by every reserve: a lease's slots are the wallet's.
    const keyRate = principal.limits?.rpm != null;
    const lease = keyRate ? undefined : this.leases?.admit(principal, amount);
    if (lease) return { rateRemaining: lease.rateRemaining, lease };
    const outcome = await this.reserveInRedis(principal, holdId, amount);
    if (outcome.ok) return outcome;
    // The key's own minute is full: no lease of this process holds any of it.
    if (!this.leases || (outcome.refusal === "RATE_LIMITED" && outcome.scope === "key")) throw refusalError(outcome);
    // Refused for credit or rate slots this process's own leases on the wallet may hold unused (leaseGiveBack.ts):
    // the key's lease admits the request after all (its call in flight took the window's last slots), or the
    // wallet's leases give back what their requests do not use, and the reserve is tried once more.
    const late = outcome.refusal === "RATE_LIMITED" && !keyRate ? await this.leases.onRefusal.readmit(principal, amount) : undefined;
    if (late) return { rateRemaining: late.rateRemaining, lease: late };
    if (await this.leases.onRefusal.giveBack(principal, outcome.refusal)) {
      const again = await this.reserveInRedis(principal, holdId, amount);
      if (again.ok) return again;
      throw refusalError(again);
    }
    throw refusalError(outcome);
  }

  private async reserveInRedis(principal: KeyPrincipal, holdId: string, amount: number): Promise<ReserveOutcome> {
    let outcome: ReserveOutcome;
    const reserving = this.ledger.reserve(principal, holdId, amount);
    const late = () => DependencyDown.late("redis", "reserve", RESERVE_DEADLINE_MS);
    try {
      try {
        outcome = await withDeadline(RESERVE_DEADLINE_MS, () => reserving, late);
      } catch (e) {
        // Late because it waits for a rebuild to open the fence, not because Redis does not answer: it waits on, as
        // long as the fence lets it (then 503 LedgerRebuilding), rather than fail every request of a long rebuild.
        if (!(e instanceof DependencyDown && this.ledger.fence.waiting)) throw e;
        outcome = await withDeadline(this.ledger.fence.waitLimit + RESERVE_DEADLINE_MS, () => reserving, late);
      }
    } catch (e) {
      // Refused by the fence: nothing was held.
      if (e instanceof LedgerRebuilding) throw e;
      this.releaseBehind(principal, holdId, reserving);
      if (!isRedisDown(e)) throw e;
      log.warn("reserve failed: Redis unavailable; answered 503 and releasing the hold behind", { hold: holdId, error: e });
      throw ApiError.unavailable(1);
    }
    return outcome;
  }

  /**
   * Settles without making the client wait for its reply: the answer is already paid for by the hold. The
   * returned promise resolves once the settle command's bytes are in the kernel's socket buffer (a macrotask after it
   * is queued, unless a settle batch of the shard is in flight: then after that one has answered; batcher.ts), and the
   * caller lets the response (or the stream's end) leave only then: a process killed with kill -9 right after an
   * answer has still sent its charge (test/ledger.kill.error), and a
   * balance read that follows on that connection sees it. Saves one Redis round trip of added latency. The settle
   * retries for about a minute; after that the charge is kept in Postgres for the repair job.
   */
  settleBehind(call: HeldCall, usage: Usage): Promise<void> {
    const charge = billedMicro(call.model, usage);
    // Charged all the same (the provider billed it), but the hold should have covered it.
    checkHoldOverrun(charge, call.bound, { model: call.model.id, hold: call.holdId, usage });
    const details: ChargeDetails = {
      promptTokens: usage.prompt_tokens,
      completionTokens: usage.completion_tokens,
      costMicro: costMicro(call.model, usage),
      model: call.model.id,
    };
    // The prompt's cache split, kept with the charge (key counters, Postgres) where there is one.
    if (usage.cached_prompt_tokens) details.cachedPromptTokens = usage.cached_prompt_tokens;
    if (usage.cache_write_tokens) details.cacheWriteTokens = usage.cache_write_tokens;
    if (usage.cache_write_1h_tokens) details.cacheWrite1hTokens = usage.cache_write_1h_tokens;
    const claim = call.lease;
    const lease = claim && { id: claim.leaseId, held: claim.amount };
    const keep: PendingSettle = { holdId: call.holdId, wallet: call.principal.wallet, keyId: call.principal.keyId, charge, details, lease };
    call.trace.chargeUsdc = charge;
    // The answer waits for the first attempt to be sent (or to end: failed, or past its deadline), never longer.
    let sent!: () => void;
    const onWire = new Promise<void>((resolve) => (sent = resolve));
    const run: Settling = { keep, attempt: 0 };
    this.settling.set(run, keep);
    this.attemptSettle(call, run, sent);
    return onWire;
  }

  /**
   * One attempt of a settle, its outcome told by callback (no promise chain per request: issue 31). Each attempt is
   * bounded: while Redis is down the client queues commands instead of failing them. A queued attempt that runs
   * later is harmless: settle-batch posts a hold once. A failed attempt is tried again after a capped backoff.
   */
  private attemptSettle(call: HeldCall, run: Settling, sent: () => void): void {
    const { keep } = run;
    const attempt = ++run.attempt;
    const end = deadline(SETTLE_ATTEMPT_MS, () => {
      sent();
      this.settleFailed(call, run, sent, DependencyDown.late("redis", "settle", SETTLE_ATTEMPT_MS));
    });
    try {
      this.ledger.settleBy(
        call.principal,
        keep.holdId,
        keep.charge,
        keep.details,
        keep.lease,
        attempt === 1 ? sent : undefined,
        (outcome, covered) => {
          if (!end()) return;
          sent();
          this.settled(call, run, outcome, covered);
        },
        (e) => {
          if (!end()) return;
          sent();
          this.settleFailed(call, run, sent, e);
        },
      );
    } catch (e) {
      if (!end()) return;
      sent();
      this.settleFailed(call, run, sent, e);
    }
  }

  private settled(call: HeldCall, run: Settling, outcome: SettleOutcome, covered: number): void {
    const claim = call.lease;
    const { keep } = run;
    try {
      // A repeat (the first try's reply was lost) does not say what the first one took: assume all it held.
      if (claim) this.leases!.settled(claim, outcome === "charged" ? covered : claim.amount);
      if (outcome === "charged") this.recent?.charged(call.principal.walletName, keep);
      if (outcome === "UNKNOWN_HOLD") {
        // Redis lost the hold (data loss): the charge is kept for an operator rather than dropped.
        log.error("settle found no hold; charge kept in pending_settles", { hold: call.holdId, charge: keep.charge, wallet: keep.wallet });
        return void this.pending.record({ ...keep, unresolved: true }).finally(() => this.settleEnded(run));
      }
    } catch (e) {
      log.error("settle bookkeeping failed", { hold: call.holdId, error: e });
    }
    this.settleEnded(run);
  }

  private settleFailed(call: HeldCall, run: Settling, sent: () => void, e: unknown): void {
    const { attempt, keep } = run;
    if (attempt < SETTLE_ATTEMPTS) {
      // Once per call, when a blip would be over: an operator sees a stuck settle while it still retries.
      const ctx = { hold: call.holdId, charge: keep.charge };
      if (attempt === STILL_FAILING_AT) log.warn("ledger settle still failing; retrying", { ...ctx, attempt, error: e });
      setTimeout(() => this.attemptSettle(call, run, sent), Math.min(2_000, 20 * 2 ** attempt));
      return;
    }
    log.error(`ledger settle failed after ${SETTLE_ATTEMPTS} attempts`, { hold: call.holdId, charge: keep.charge, error: e });
    // Kept for the repair job, which posts it later: until then its part of the lease stays locked in Redis.
    if (call.lease) this.leases!.settled(call.lease, call.lease.amount);
    void this.pending.record(keep).finally(() => this.settleEnded(run));
  }

  private settleEnded(run: Settling): void {
    this.settling.delete(run);
    if (this.settling.size > 0) return;
    const waiting = this.drained;
    this.drained = [];
    for (const f of waiting) f();
  }

  /** Voids a hold (nothing is charged), retried briefly; never throws: the sweeper expires a hold left behind. */
  async release(hold: { principal: KeyPrincipal; holdId: string; lease?: LeaseClaim }, attempts = RELEASE_ATTEMPTS): Promise<void> {
    if (hold.lease) return this.leases!.giveBack(hold.lease);
    // Bounded like a settle attempt: while Redis is down the client queues commands instead of failing them.
    const attempt = () =>
      withDeadline(
        SETTLE_ATTEMPT_MS,
        () => this.ledger.release(hold.principal, hold.holdId),
        () => DependencyDown.late("redis", "release", SETTLE_ATTEMPT_MS),
      );
    await retry("release", attempt, { hold: hold.holdId }, attempts).catch(() => {
      // The hold expires by itself through the sweeper; the client's answer must not wait for Redis.
    });
  }

  /**
   * Releases a hold that may or may not exist (its reserve's reply did not come in time), without making anyone
   * wait. That reserve may still run: queued in its shard's batcher behind a call in flight, redirected by the
   * Cluster client through a failover, queued for a reconnect. A release that ran first would find no hold, and the
   * reserve would then open one nobody resolves (its credit locked until the sweeper): so the release goes once
   * `reserve` has its outcome (or after RESERVE_OUTCOME_WAIT_MS), and retries as long as a settle does, through a
   * failover.
   */
  releaseBehind(principal: KeyPrincipal, holdId: string, reserve: Promise<unknown>): void {
    const p: Promise<void> = outcomeOf(reserve, RESERVE_OUTCOME_WAIT_MS)
      .then(() => this.release({ principal, holdId }, SETTLE_ATTEMPTS))
      .finally(() => this.releasing.delete(p));
    this.releasing.add(p);
  }

  /** Waits for settles and releases still in flight: shutdown calls it before the final outbox drain. */
  async idle(): Promise<void> {
    while (this.settling.size > 0 || this.releasing.size > 0) {
      const settles = this.settling.size > 0 ? new Promise<void>((resolve) => this.drained.push(resolve)) : undefined;
      await Promise.all([settles, ...this.releasing]);
    }
  }

  /** Shutdown ran out of time: the settles still running go to Postgres, posted at the next start (once). */
  async keepInFlight(): Promise<number> {
    const left = [...this.settling.values()];
    await Promise.all(left.map((k) => this.pending.record(k)));
    return left.length;
  }
}

/** Resolves when `p` has settled either way, or after `ms`. */
function outcomeOf(p: Promise<unknown>, ms: number): Promise<void> {
  return withDeadline(
    ms,
    () => p,
    () => new Error(`no outcome within ${ms} ms`),
  ).then(
    () => {},
    () => {},
  );
}

/** Retries a ledger call (it is idempotent by hold id) with capped backoff; a settle must not be lost to a blip. */
async function retry<T>(what: string, fn: () => Promise<T>, ctx: Record<string, unknown>, attempts: number): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (e) {
      if (attempt >= attempts) {
        log.error(`ledger ${what} failed after ${attempts} attempts`, { ...ctx, error: e });
        throw e;
      }
      // Once per call, when a blip would be over: an operator sees a stuck settle while it still retries.
      if (attempt === STILL_FAILING_AT) log.warn(`ledger ${what} still failing; retrying`, { ...ctx, attempt, error: e });
      await Bun.sleep(Math.min(2_000, 20 * 2 ** attempt));
    }
  }
}
