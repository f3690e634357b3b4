import type { RedisCommands } from "../redis/connect.ts";
import { boundCounters } from "../observe/bound.ts";
import { holdClosed, holdOpened, metrics } from "../observe/metrics.ts";
import { ApiKeyState } from "./apiKeyState.ts";
import { LedgerBatches, type SettleItem } from "./batcher.ts";
import type { SettleItemReply } from "./scripts.ts";
import { LedgerFence } from "./fence.ts";
import type { RedisNames } from "./names.ts";
import { LedgerReads } from "./reads.ts";
import type { LedgerScripts } from "./scripts.ts";
import type { KeyLimits, KeyPrincipal } from "./names.ts";

export type { KeyLimits, KeyPrincipal } from "./names.ts";

export type { ChargeDetails, LeaseAsk, LeaseReply, LedgerLimits, ReserveOutcome, ReserveRefusal, SettleOutcome } from "./types.ts";

// Counted on every request: bound once per outcome (observe/bound.ts).
const reserves = boundCounters(metrics.reserves);
const settles = boundCounters(metrics.settles);
import type { ChargeDetails, LeaseAsk, LeaseReply, LedgerLimits, ReserveOutcome, ReserveRefusal, SettleOutcome } from "./types.ts";

/** The window of a key's own rate limit (`requests_per_minute`), as reserve-batch.lua counts it. */
export const KEY_RATE_WINDOW_MS = 60_000;

/** A leased settle's lease: its id, what the request held of it. */
type Lease = { id: string; held: number };
// settleBy's callbacks: the batch is on the connection; the outcome and what the lease covered; the batch's failure.
type Sent = (() => void) | undefined;
type Done = (outcome: SettleOutcome, covered: number) => void;
type Fail = (e: unknown) => void;

// A resolved hold's marker outlives any retry or late settle by far.
const RESOLUTION_TTL_S = 7 * 24 * 3600;

/**
 * The TypeScript face of the Lua ledger: every balance change is an atomic script call; the chat path's reserves
 * and settles are batched per shard (batcher.ts), and any other call or read of a shard is sent after them.
 */
export class Ledger {
  /** The epoch this process believes in, per shard; every script call goes through it. */
  readonly fence: LedgerFence;
  /** API keys in Redis: hash → key mapping and each key's state. */
  readonly apiKeys: ApiKeyState;
  /** Reads that run no script (reads.ts): a wallet's balance, keys' counters and budget left, Redis's clock. */
  readonly reads: LedgerReads;
  private readonly batches: LedgerBatches;

  constructor(
    readonly redis: RedisCommands,
    readonly scripts: LedgerScripts,
    readonly names: RedisNames,
    private readonly limits: LedgerLimits,
  ) {
    this.fence = new LedgerFence(scripts.client, names);
    this.apiKeys = new ApiKeyState(redis, names, (keyId, wallet, limits) => this.principal(keyId, wallet, limits));
    this.batches = new LedgerBatches(scripts, this.fence, names, { ...limits, resolutionTtlS: RESOLUTION_TTL_S });
    this.reads = new LedgerReads(scripts.client, names, (shard) => this.batches.flush(shard));
  }

  /**
   * Runs `put` (commands for the shard's connection) in the same write as its next settles (batcher.ts ride): a
   * lease's settles when those wait (a leased request's own settle is one of them), else the others.
   */
  alongside(shard: string, put: () => void): void {
    const { leasedSettles, settles } = this.batches;
    const queue = this.batches.queue(shard);
    if (leasedSettles.waiting(queue)) leasedSettles.ride(queue, put);
    else settles.ride(queue, put);
  }

  /** Sends a shard's queued reserves and settles now, and what rides with them: a read sent next comes after them. */
  flushShard(shard: string): void {
    this.batches.flush(shard);
  }

  /** Sends every shard's queued reserves and settles now (a drain of the outbox follows). */
  flushQueued(): void {
    for (const shard of this.names.allShards()) this.batches.flush(shard);
  }

  /** Whether the scripts' connection is up now: the chat path answers 503 at once rather than queue a reserve. */
  get connected(): boolean {
    return this.scripts.client.connected;
  }

  /** Builds the principal for a key id and wallet (lower-case hex), with the key's own limits if it has any. */
  principal(keyId: number, wallet: string, limits?: KeyLimits): KeyPrincipal {
    const shard = this.names.shardOf(wallet);
    const p: KeyPrincipal = {
      keyId,
      wallet,
      shard,
      walletName: this.names.wallet(shard, wallet),
      apiKeyName: this.names.apiKey(shard, keyId),
    };
    if (limits && (limits.models !== null || limits.rpm !== null)) p.limits = limits;
    return p;
  }

  /**
   * Holds `amount` for one request, or says why not (a typed refusal, nothing held). Throws only for a hold id
   * that was already resolved (a caller bug) and when Redis cannot answer.
   */
  async reserve(p: KeyPrincipal, holdId: string, amount: number): Promise<ReserveOutcome> {
    const { rateLimitRequests: limit, rateLimitWindowMs: windowMs } = this.limits;
    const rpm = p.limits?.rpm ?? 0;
    const r = await this.batches.reserves.submit(this.batches.queue(p.shard), { ...p, holdId, amount, rpm });
    if (r[0] === 1) {
      reserves("ok", () => ({ outcome: "ok" })).inc();
      holdOpened(holdId, amount);
      return { ok: true, available: r[1] as number, rateRemaining: Number(r[2] ?? 0) };
    }
    const refusal = String(r[1]);
    reserves(refusal, () => ({ outcome: refusal })).inc();
    const detail = Number(r[2] ?? 0);
    switch (r[1]) {
      case "RATE_LIMITED":
        // The key's own minute, or the wallet's window (reserve-batch says which).
        return r[3] === "key"
          ? { ok: false, refusal: "RATE_LIMITED", limit: rpm, windowMs: KEY_RATE_WINDOW_MS, retryAfterMs: detail, scope: "key" }
          : { ok: false, refusal: "RATE_LIMITED", limit, windowMs, retryAfterMs: detail, scope: "wallet" };
      case "KEY_BUDGET_EXCEEDED":
        return { ok: false, refusal: "KEY_BUDGET_EXCEEDED", budgetLeft: detail, required: amount };
      case "INSUFFICIENT_BALANCE":
        return { ok: false, refusal: "INSUFFICIENT_BALANCE", available: detail, required: amount };
      case "HOLD_RESOLVED":
        // Hold ids are fresh per request; only a caller bug reuses one, and it must not reopen the hold.
        throw new Error(`hold ${holdId} was already resolved`);
      default:
        return { ok: false, refusal: "UNAUTHORIZED" };
    }
  }

  /**
   * Counts a request that holds no credit (count_tokens) against the wallet's rate limit, once its key is found
   * active: one script call, the reserve's window and counters.
   */
  async countRequest(p: KeyPrincipal): Promise<{ ok: true; rateRemaining: number } | ReserveRefusal> {
    const { rateLimitRequests: limit, rateLimitWindowMs: windowMs } = this.limits;
    this.batches.flush(p.shard);
    const now = Date.now();
    const window = Math.floor(now / windowMs);
    const k = this.names;
    const keys: [string, string, string] = [p.apiKeyName, k.rate(p.shard, p.wallet, window), k.rate(p.shard, p.wallet, window - 1)];
    const r = await this.scripts.countRequest(keys, limit, windowMs, now - window * windowMs);
    if (r[0] === 1) return { ok: true, rateRemaining: Number(r[1]) };
    if (r[1] === "RATE_LIMITED")
      return { ok: false, refusal: "RATE_LIMITED", limit, windowMs, retryAfterMs: Number(r[2] ?? 0), scope: "wallet" };
    return { ok: false, refusal: "UNAUTHORIZED" };
  }

  private holdKeys(p: { shard: string; walletName: string; apiKeyName: string }, holdId: string) {
    const k = this.names;
    return [p.walletName, p.apiKeyName, k.holds(p.shard), k.holdMarker(p.shard, holdId), k.outbox(p.shard), k.fence(p.shard)];
  }

  /** Posts the hold as the actual charge. Returns false when the hold was already resolved (a retry) or unknown. */
  async settle(p: KeyPrincipal, holdId: string, charge: number, d: ChargeDetails): Promise<boolean> {
    return (await this.settleOutcome(p, holdId, charge, d)) === "charged";
  }

  /** settle, telling why nothing was charged: the hold was settled or released before, or Redis does not know it. */
  settleOutcome(p: KeyPrincipal, holdId: string, charge: number, d: ChargeDetails, sent?: () => void): Promise<SettleOutcome> {
    return new Promise((resolve, reject) => this.settleBy(p, holdId, charge, d, undefined, sent, resolve, reject));
  }

  /**
   * Charges a request a credit lease admitted (settle-leased-batch.lua): `chargeId` is the request's own, `held`
   * what it held of the lease. `covered`: how much of the charge came out of the lease's lock.
   */
  settleLeased(p: KeyPrincipal, chargeId: string, charge: number, d: ChargeDetails, lease: Lease, sent?: () => void) {
    return new Promise<{ outcome: SettleOutcome; covered: number }>((resolve, reject) =>
      this.settleBy(p, chargeId, charge, d, lease, sent, (outcome, covered) => resolve({ outcome, covered }), reject),
    );
  }

  /**
   * settleOutcome, or settleLeased given a `lease`, its outcome told to callbacks, no promise per settle (billing/
   * holds.ts). `sent`: called once the settle's batch is on the connection (a call in flight on its queue answered
   * first). `done`: the outcome and what the lease covered (0 unleased); `fail`: the batch's failure. Neither
   * callback may throw.
   */
  settleBy(p: KeyPrincipal, id: string, charge: number, d: ChargeDetails, lease: Lease | undefined, sent: Sent, done: Done, fail: Fail) {
    const b = this.batches;
    const item: SettleItem = lease
      ? { ...p, ...d, holdId: id, charge, lease: lease.id, held: lease.held }
      : { ...p, ...d, holdId: id, charge };
    const ok = (r: SettleItemReply) => {
      const outcome = r[0] === 1 ? "charged" : (r[1] as Exclude<SettleOutcome, "charged">);
      settles(outcome, () => ({ outcome })).inc();
      holdClosed(id);
      done(outcome, r[0] === 1 ? Number(r[1] ?? 0) : 0);
    };
    const failed = (e: unknown) => (metrics.settles.inc({ outcome: "error" }), fail(e));
    (lease ? b.leasedSettles : b.settles).submitTo(b.queue(p.shard), item, ok, failed, sent);
  }

  /** How often a running stream pushes its hold's expiry forward: well within one hold lifetime. */
  get holdRefreshMs(): number {
    return Math.max(1_000, Math.floor(this.limits.holdTtlMs / 3));
  }

  /**
   * Pushes a live hold's expiry one lifetime ahead (a long stream must not lose its hold to the sweeper). ZADD XX
   * only touches a hold still in the index, so a settled, released or expired hold is never revived; GT never
   * shortens it.
   */
  async extendHold(p: KeyPrincipal, holdId: string): Promise<boolean> {
    // Redis's clock, like reserve-batch and the sweeper: a gateway clock running behind must not make this a no-op.
    const now = await this.reads.redisNowMs(p.shard);
    const holds = this.names.holds(p.shard);
    const changed = await this.scripts.client.send("ZADD", [holds, "XX", "GT", "CH", String(now + this.limits.holdTtlMs), holdId], holds);
    return Number(changed) === 1;
  }

  /**
   * Opens, resizes, renews or closes a credit lease (lease-8.lua), after the shard's queued settles, so a lease
   * shrunk or closed here has already given up what those charges covered.
   */
  async lease(p: KeyPrincipal, ask: LeaseAsk): Promise<LeaseReply> {
    const { rateLimitRequests: limit, rateLimitWindowMs: windowMs } = this.limits;
    this.batches.flush(p.shard);
    const k = this.names;
    let window = 0;
    const r = await this.fence.run(p.shard, (epoch) => {
      const now = Date.now();
      window = Math.floor(now / windowMs);
      const keys = [p.walletName, p.apiKeyName, k.holds(p.shard), k.holdMarker(p.shard, ask.leaseId)];
      keys.push(k.rate(p.shard, p.wallet, window), k.rate(p.shard, p.wallet, window - 1), k.outbox(p.shard), k.fence(p.shard));
      const back = ask.slotsWindow === window ? ask.slotsBack : 0;
      return this.scripts.lease(keys, [
        epoch,
        ask.leaseId,
        `${p.wallet}|${p.keyId}`,
        ask.target,
        ask.floor,
        ask.sharePerMille,
        ask.least,
        ask.slots,
        back,
        limit,
        windowMs,
        now - window * windowMs,
        ask.ttlMs,
        RESOLUTION_TTL_S,
      ]);
    });
    if (r[0] === 1) {
      const [, locked, available, slots, before, rateLeft] = r.map(Number);
      return { ok: true, locked: locked!, available: available!, slots: slots!, before: before!, rateLeft: rateLeft!, window };
    }
    if (r[1] === "UNAUTHORIZED") return { ok: false, refusal: "UNAUTHORIZED", locked: Number(r[2]), before: Number(r[3]), window };
    return { ok: false, refusal: "HOLD_RESOLVED", window };
  }

  /** Voids the hold (upstream failed): nothing is charged. */
  async release(p: KeyPrincipal, holdId: string): Promise<boolean> {
    this.batches.flush(p.shard);
    const r = await this.fence.run(p.shard, (epoch) =>
      this.scripts.release(this.holdKeys(p, holdId), epoch, holdId, "release", RESOLUTION_TTL_S),
    );
    holdClosed(holdId);
    if (r[0] === 1) metrics.releases.inc({ reason: "release" });
    return r[0] === 1;
  }

  /** Credits money that Postgres already recorded; idempotent by credit id. */
  async credit(wallet: string, creditId: string, amount: number): Promise<{ applied: boolean; balance: number }> {
    const shard = this.names.shardOf(wallet);
    const k = this.names;
    this.batches.flush(shard);
    const r = await this.fence.run(shard, (epoch) =>
      this.scripts.credit([k.wallet(shard, wallet), k.credited(shard), k.fence(shard)], epoch, creditId, amount),
    );
    return { applied: r[0] === 1, balance: Number(r[1]) };
  }

  /**
   * Settles a pending credit (an x402 `upto` authorization credited at its maximum) down to `amount`, which Postgres
   * already records; idempotent. A credit Redis has not applied yet is applied at `recorded` (Postgres's amount before
   * this change) first. Returns the balance after.
   */
  async settleCredit(wallet: string, creditId: string, recorded: number, amount: number): Promise<number> {
    const shard = this.names.shardOf(wallet);
    const k = this.names;
    const keys: [string, string, string] = [k.wallet(shard, wallet), k.credited(shard), k.fence(shard)];
    this.batches.flush(shard);
    let r = await this.fence.run(shard, (epoch) => this.scripts.creditSettle(keys, epoch, creditId, amount));
    if (r[1] === "UNKNOWN") {
      await this.credit(wallet, creditId, recorded);
      r = await this.fence.run(shard, (epoch) => this.scripts.creditSettle(keys, epoch, creditId, amount));
    }
    return Number(r[1]);
  }

  /** Expires holds whose lifetime passed (a crashed gateway's); returns how many were released. */
  async sweepExpired(batch = 200): Promise<number> {
    let released = 0;
    for (const shard of this.names.allShards()) {
      this.batches.flush(shard);
      const now = await this.reads.redisNowMs(shard);
      const ids = await this.redis.zrangebyscore(this.names.holds(shard), 0, now, "LIMIT", 0, batch);
      for (const holdId of ids) {
        const marker = await this.redis.get(this.names.holdMarker(shard, holdId));
        if (!marker?.startsWith("live|")) continue;
        const [, , wallet = "", keyId = ""] = marker.split("|");
        const p = { shard, walletName: this.names.wallet(shard, wallet), apiKeyName: this.names.apiKey(shard, keyId) };
        const r = await this.fence.run(shard, (epoch) =>
          this.scripts.release(this.holdKeys(p, holdId), epoch, holdId, "expire", RESOLUTION_TTL_S),
        );
        holdClosed(holdId);
        if (r[0] === 1) {
          released++;
          metrics.releases.inc({ reason: "expire" });
        }
      }
    }
    return released;
  }
}
