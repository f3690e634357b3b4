import { log } from "../log.ts";
import type { KeyRouter } from "../redis/router.ts";
import type { PendingSettle, PendingSettles } from "../store/pendingSettles.ts";

// How long a master's acknowledged charge is kept, counted back from the master's latest acknowledgement: far
// above the lag of a replica on a working link (milliseconds), so what a dead master had not passed on is here.
const KEPT_MS = 2_000;

interface Kept {
  at: number;
  settle: PendingSettle;
}

/**
 * Charges each Redis Cluster master acknowledged lately, so a failover does not lose them. Redis replicates
 * asynchronously: a master killed right after it acknowledged a settle can leave a promoted replica that never
 * received it, with the hold open again and the charge gone (the client was served). When a master loses its
 * slots, the charges it acknowledged in its last KEPT_MS go to pending_settles and are posted at once on the new
 * owner: one that did arrive answers "settled" (settle-batch posts a hold once), one that did not is charged.
 * One Redis has no replica to fail over to: nothing is kept there.
 */
export class RecentCharges {
  private readonly byMaster = new Map<string, Kept[]>();

  constructor(
    private readonly router: KeyRouter,
    private readonly pending: PendingSettles,
  ) {
    router.onOwnerLost((node) => void this.lost(node));
  }

  /** A settle Redis answered "charged"; `routeKey` is a key of its shard (its slot says which master it was). */
  charged(routeKey: string, settle: PendingSettle): void {
    const master = this.router.ownerOf(routeKey);
    if (master === undefined) return;
    const now = Date.now();
    let kept = this.byMaster.get(master);
    if (!kept) this.byMaster.set(master, (kept = []));
    kept.push({ at: now, settle });
    // Dropped in chunks, so each charge costs a push and a comparison, not a shift.
    if (kept.length % 256 === 0) {
      const old = kept.findIndex((k) => k.at >= now - KEPT_MS);
      if (old > 0) kept.splice(0, old);
    }
  }

  private async lost(master: string): Promise<void> {
    const kept = this.byMaster.get(master);
    this.byMaster.delete(master);
    const last = kept?.at(-1)?.at;
    if (!kept || last === undefined) return;
    const recent = kept.filter((k) => k.at >= last - KEPT_MS).map((k) => k.settle);
    log.warn("Redis Cluster master lost its slots: the charges it acknowledged last are posted again on the new owner", {
      master,
      charges: recent.length,
    });
    await this.pending.recordMany(recent);
    await this.pending.replay().catch((e: unknown) => {
      // The repair job posts them (every 30 s).
      log.warn("posting the charges of a lost master failed; the repair job retries", { master, error: e });
    });
  }
}
