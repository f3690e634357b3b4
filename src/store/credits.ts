import type { Ledger } from "../ledger/ledger.ts";
import { log } from "../log.ts";
import { DependencyDown } from "../outage.ts";
import type { Sql } from "./db.ts";

/** Money in, whatever its source. */
export interface CreditInput {
  /** Idempotency id: a retry with the same id credits nothing twice. */
  eventId: string;
  wallet: string;
  kind: "topup" | "grant" | "redeem" | "upto";
  amountUsdc: number;
  reason?: string;
  txHash?: string;
  network?: string;
  /** The paying address of a top-up, when it is not `wallet` (a paid call credits the key's owner). */
  payer?: string;
}

const RETRY_DELAYS_MS = [50, 250, 1000];

/** A Postgres error from before the query was sent: no connection was made, or the client refused (Postgres down). */
function neverSent(e: unknown): boolean {
  if (e instanceof DependencyDown) return true;
  const x = (e ?? {}) as { code?: string; syscall?: string };
  return x.code === "CONNECT_TIMEOUT" || (x.syscall === "connect" && x.code !== undefined);
}

/**
 * Records money in: Postgres first (durable before any 2xx), then the Redis ledger (idempotent by event id),
 * then marks it applied. A crash in between leaves `applied_at` NULL and `reapplyPending` finishes the job.
 */
export class Credits {
  constructor(
    private readonly sql: Sql,
    private readonly ledger: Ledger,
  ) {}

  async add(c: CreditInput): Promise<{ id: number; balance: number; duplicate: boolean }> {
    const r = await this.record(this.sql, c);
    const { balance } = await this.apply(r.id, r.eventId, r.wallet, r.amountUsdc);
    return { id: r.id, balance, duplicate: r.duplicate };
  }

  /**
   * Inserts the credit row without touching Redis (the rebuild records deferred credits so). A conflict (same
   * event id or settlement transaction) returns the row already there, marked duplicate.
   */
  async record(q: Sql, c: CreditInput): Promise<{ id: number; eventId: string; wallet: string; amountUsdc: number; duplicate: boolean }> {
    const [row] = await q<{ id: number }[]>`
      INSERT INTO credits (event_id, wallet, kind, amount_usdc, reason, tx_hash, network, payer)
      VALUES (${c.eventId}, ${c.wallet}, ${c.kind}, ${c.amountUsdc}, ${c.reason ?? null}, ${c.txHash ?? null}, ${c.network ?? null},
              ${c.payer ?? null})
      ON CONFLICT DO NOTHING RETURNING id`;
    if (row) return { id: row.id, eventId: c.eventId, wallet: c.wallet, amountUsdc: c.amountUsdc, duplicate: false };
    const [prior] = await q<{ id: number; event_id: string; wallet: string; amount_usdc: number }[]>`
      SELECT id, event_id, wallet, amount_usdc FROM credits
      WHERE event_id = ${c.eventId} OR (${c.txHash ?? null}::text IS NOT NULL AND tx_hash = ${c.txHash ?? null})`;
    if (!prior) throw new Error("credit conflicted but no prior row was found");
    return { id: prior.id, eventId: prior.event_id, wallet: prior.wallet, amountUsdc: prior.amount_usdc, duplicate: true };
  }

  /** Applies a credit row another statement wrote (a redeem) to Redis and marks it applied. */
  async applyRecorded(r: { id: number; eventId: string; wallet: string; amountUsdc: number }) {
    return this.apply(r.id, r.eventId, r.wallet, r.amountUsdc);
  }

  /**
   * For money that already moved on chain: `add`, retried on Postgres errors; when Postgres stays down the
   * credit goes to the Redis outbox and the ledger at once, so a settled payment is never lost. Throws only
   * when it could not be applied; the error log then says whether a repair job will still apply it (a row in
   * Postgres, an entry in the Redis outbox, or possibly either) or, only when neither can exist, to grant it by
   * hand, so an operator never credits a payment twice.
   */
  async addSettled(c: CreditInput): Promise<{ balance: number; duplicate: boolean; deferred: boolean }> {
    let lastError: unknown;
    // recorded: a credits row exists (the repair job applies it). reachedPostgres: an insert may have committed
    // even though its answer was lost.
    let recorded = false;
    let reachedPostgres = false;
    for (let attempt = 0; attempt <= RETRY_DELAYS_MS.length; attempt++) {
      try {
        const r = await this.record(this.sql, c);
        recorded = true;
        const { balance } = await this.apply(r.id, r.eventId, r.wallet, r.amountUsdc);
        // A conflict on a retry is this call's own earlier insert (whose Redis write failed), not a duplicate.
        return { balance, duplicate: r.duplicate && attempt === 0, deferred: false };
      } catch (e) {
        lastError = e;
        if (!recorded && !neverSent(e)) reachedPostgres = true;
        const delay = RETRY_DELAYS_MS[attempt];
        if (delay !== undefined) await Bun.sleep(delay);
      }
    }
    log.error(
      `credit ${recorded ? "recorded in Postgres but not applied" : "not recorded in Postgres"} after retries; deferring it to the Redis credit outbox`,
      { event_id: c.eventId, error: lastError },
    );
    // Only a write that was sent can have landed: with the connection down it is not queued, so its failure is sure.
    const outboxSent = this.ledger.redis.status === "ready";
    try {
      if (!outboxSent) throw new DependencyDown("redis", "Redis is not connected");
      await this.ledger.redis.hsetnx(this.ledger.names.creditOutbox, c.eventId, JSON.stringify(c));
    } catch (e) {
      if (recorded) {
        log.error("settled payment recorded in Postgres but not applied to the balance yet; the repair job applies it (do not grant it)", {
          event_id: c.eventId,
          wallet: c.wallet,
          error: e,
        });
      } else if (!reachedPostgres && !outboxSent) {
        log.error("SETTLED PAYMENT NOT CREDITED: grant it by hand", { ...c, error: e });
      } else {
        log.error(
          `SETTLED PAYMENT NOT CREDITED YET: Postgres or the Redis credit outbox may hold it, and the repair job applies it from there; grant it only if neither credits nor ${this.ledger.names.creditOutbox} has its event_id`,
          { ...c, error: e },
        );
      }
      throw e;
    }
    try {
      if (!this.ledger.scripts.client.connected) throw new DependencyDown("redis", "Redis is not connected");
      const { balance } = await this.ledger.credit(c.wallet, c.eventId, c.amountUsdc);
      return { balance, duplicate: false, deferred: true };
    } catch (e) {
      log.error(
        "settled payment kept in the Redis credit outbox but not applied yet; the repair job records and applies it (do not grant it)",
        { event_id: c.eventId, wallet: c.wallet, error: e },
      );
      throw e;
    }
  }

  private async apply(id: number, eventId: string, wallet: string, amount: number) {
    // Fails at once while the ledger's connection is down, rather than queueing until Redis returns; the row stays
    // unapplied for the repair job.
    if (!this.ledger.scripts.client.connected) throw new DependencyDown("redis", "Redis is not connected");
    const r = await this.ledger.credit(wallet, eventId, amount);
    await this.sql`UPDATE credits SET applied_at = now() WHERE id = ${id} AND applied_at IS NULL`;
    return r;
  }

  /**
   * Completes money in that stopped half way: credits deferred to the Redis outbox (Postgres was down) are
   * inserted, and credits that reached Postgres but not Redis (a crash between the two writes) are applied.
   * Runs at start and in the repair job (every 30 s); tests call it instead of waiting.
   */
  async reapplyPending(): Promise<number> {
    let done = 0;
    const deferred = await this.ledger.redis.hgetall(this.ledger.names.creditOutbox);
    for (const [eventId, json] of Object.entries(deferred)) {
      await this.add(JSON.parse(json) as CreditInput);
      await this.ledger.redis.hdel(this.ledger.names.creditOutbox, eventId);
      log.warn("deferred credit recorded in Postgres", { event_id: eventId });
      done++;
    }
    const rows = await this.sql<{ id: number; event_id: string; wallet: string; amount_usdc: number }[]>`
      SELECT id, event_id, wallet, amount_usdc FROM credits WHERE applied_at IS NULL ORDER BY id LIMIT 1000`;
    for (const r of rows) {
      const { applied } = await this.apply(r.id, r.event_id, r.wallet, r.amount_usdc);
      if (applied) log.warn("credit applied late by the reconciler", { credit_id: r.id, wallet: r.wallet });
    }
    return done + rows.length;
  }
}
