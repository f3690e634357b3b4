import type { Ledger } from "../ledger/ledger.ts";
import { log } from "../log.ts";

/** Long enough to ride out a GC pause or a slow round trip, short enough that a dead rebuilder is replaced soon. */
export const REBUILD_LOCK_TTL_MS = 30_000;

/** The rebuild lock was taken over or may have been (its lifetime ran out unrenewed): this rebuild must stop. */
export class RebuildLockLost extends Error {}

/**
 * The one lock that lets a process rebuild the ledger. It carries an owner token, is renewed while the rebuild
 * works (every third of its lifetime), and is renewed and released only by its owner (compare-and-set-1.lua), so
 * a rebuilder that stalled past the lifetime can neither release nor extend a lock someone else now holds.
 * Only Redis's answer proves the lock still held: once a lifetime has passed since the last confirmed renewal
 * (renewals failing, or this process paused and its timer never ran), the lock counts as lost. The rebuild's
 * writes also check the fence in Redis itself (batch.ts), which a stale rebuilder cannot get past.
 */
export class RebuildLock {
  private lost = false;
  private readonly timer: ReturnType<typeof setInterval>;

  private constructor(
    private readonly ledger: Ledger,
    readonly token: string,
    private readonly ttlMs: number,
    /** performance.now() when the last request that Redis confirmed was sent: the lock lives ttlMs from then. */
    private confirmedAt: number,
  ) {
    this.timer = setInterval(() => void this.renew(), Math.max(10, Math.floor(ttlMs / 3)));
  }

  /** Takes the lock if nobody holds it; null otherwise. */
  static async tryAcquire(ledger: Ledger, ttlMs = REBUILD_LOCK_TTL_MS): Promise<RebuildLock | null> {
    const token = `${process.pid}:${crypto.randomUUID()}`;
    const sentAt = performance.now();
    const ok = await ledger.redis.set(ledger.names.rebuildLock, token, "PX", ttlMs, "NX");
    return ok ? new RebuildLock(ledger, token, ttlMs, sentAt) : null;
  }

  /** Takes the lock, waiting while another process holds it (a holder that dies loses it within its lifetime). */
  static async acquire(ledger: Ledger, ttlMs = REBUILD_LOCK_TTL_MS): Promise<RebuildLock> {
    for (let logged = false; ; logged = true) {
      const lock = await RebuildLock.tryAcquire(ledger, ttlMs);
      if (lock) return lock;
      if (!logged) log.info("another process is rebuilding the ledger; waiting for its lock");
      await Bun.sleep(100);
    }
  }

  /** Throws RebuildLockLost when a renewal found the lock taken over or none was confirmed within its lifetime. */
  assertHeld(): void {
    if (!this.lost && performance.now() - this.confirmedAt >= this.ttlMs) {
      this.lost = true;
      log.error("the ledger rebuild lock was not renewed within its lifetime; stopping this rebuild");
    }
    if (this.lost) throw new RebuildLockLost("lost the ledger rebuild lock (taken over or not renewed in time); this rebuild stops");
  }

  /** Renews now and reports whether the lock is still this owner's. */
  async renew(): Promise<boolean> {
    if (this.lost) return false;
    const sentAt = performance.now();
    try {
      if (await this.ledger.scripts.compareAndSet(this.ledger.names.rebuildLock, this.token, this.token, this.ttlMs)) {
        this.confirmedAt = Math.max(this.confirmedAt, sentAt);
        return true;
      }
      this.lost = true;
      log.error("the ledger rebuild lock was taken over; stopping this rebuild");
    } catch (e) {
      log.warn("renewing the ledger rebuild lock failed; trying again", { error: e });
    }
    return !this.lost;
  }

  /** Stops renewing and deletes the lock if it is still this owner's. */
  async release(): Promise<void> {
    clearInterval(this.timer);
    await this.ledger.scripts.compareAndSet(this.ledger.names.rebuildLock, this.token, "");
  }
}
