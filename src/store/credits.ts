import type { Ledger } from "../ledger/ledger.ts";
import { log } from "../log.ts";
import type { Sql } from "./db.ts";

/** Money in, whatever its source. */
export interface CreditInput {
  /** Idempotency id: a retry with the same id credits nothing twice. */
  eventId: string;
  wallet: string;
  kind: "topup" | "grant" | "redeem";
  amountUsdc: number;
  reason?: string;
  txHash?: string;
  network?: string;
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
    const [row] = await this.sql<{ id: number }[]>`
      INSERT INTO credits (event_id, wallet, kind, amount_usdc, reason, tx_hash, network)
      VALUES (${c.eventId}, ${c.wallet}, ${c.kind}, ${c.amountUsdc}, ${c.reason ?? null}, ${c.txHash ?? null}, ${c.network ?? null})
      ON CONFLICT DO NOTHING RETURNING id`;
    if (!row) {
      const [prior] = await this.sql<{ id: number; event_id: string; wallet: string; amount_usdc: number }[]>`
        SELECT id, event_id, wallet, amount_usdc FROM credits
        WHERE event_id = ${c.eventId} OR (${c.txHash ?? null}::text IS NOT NULL AND tx_hash = ${c.txHash ?? null})`;
      if (!prior) throw new Error("credit conflicted but no prior row was found");
      const { balance } = await this.apply(prior.id, prior.event_id, prior.wallet, prior.amount_usdc);
      return { id: prior.id, balance, duplicate: true };
    }
    const { balance } = await this.apply(row.id, c.eventId, c.wallet, c.amountUsdc);
    return { id: row.id, balance, duplicate: false };
  }

  private async apply(id: number, eventId: string, wallet: string, amount: number) {
    const r = await this.ledger.credit(wallet, eventId, amount);
    await this.sql`UPDATE credits SET applied_at = now() WHERE id = ${id} AND applied_at IS NULL`;
    return r;
  }

  /** Applies credits that reached Postgres but not Redis (a crash between the two writes). */
  async reapplyPending(): Promise<number> {
    const rows = await this.sql<{ id: number; event_id: string; wallet: string; amount_usdc: number }[]>`
      SELECT id, event_id, wallet, amount_usdc FROM credits WHERE applied_at IS NULL ORDER BY id LIMIT 1000`;
    for (const r of rows) {
      const { applied } = await this.apply(r.id, r.event_id, r.wallet, r.amount_usdc);
      if (applied) log.warn("credit applied late by the reconciler", { credit_id: r.id, wallet: r.wallet });
    }
    return rows.length;
  }
}
