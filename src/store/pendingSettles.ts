import type { ChargeDetails, Ledger } from "../ledger/ledger.ts";
import { log } from "../log.ts";
import { metrics } from "../observe/metrics.ts";
import type { Sql } from "./db.ts";
import { ledgerEventId } from "./flusher.ts";

/** A settle that could not be posted: enough to post it later. */
export interface PendingSettle {
  holdId: string;
  wallet: string;
  keyId: number;
  charge: number;
  details: ChargeDetails;
  /** Redis no longer knows the hold (it lost its data): kept for an operator instead of replayed. */
  unresolved?: boolean;
  /** Admitted under this credit lease, holding `held` of it: posted by settle-leased-batch (holdId is the charge's id). */
  lease?: { id: string; held: number };
}

/** A settle as its pending_settles row. */
function rowOf(p: PendingSettle) {
  const d = p.details;
  return {
    hold_id: p.holdId,
    wallet: p.wallet,
    api_key_id: p.keyId,
    charge_usdc: p.charge,
    prompt_tokens: d.promptTokens,
    completion_tokens: d.completionTokens,
    cost_usd_micro: d.costMicro,
    model: d.model,
    cached_prompt_tokens: d.cachedPromptTokens ?? 0,
    cache_write_tokens: d.cacheWriteTokens ?? 0,
    cache_write_1h_tokens: d.cacheWrite1hTokens ?? 0,
    unresolved: p.unresolved ?? false,
    lease_id: p.lease?.id ?? null,
    lease_held: p.lease?.held ?? null,
  };
}

/**
 * The last resort for a charge: a settle that kept failing (Redis unreachable for about a minute) is written to
 * Postgres, and `replay` (the repair job) posts it once Redis answers again. settle-batch charges a hold the sweeper
 * expired meanwhile, and is a no-op for one already settled, so a replay never charges twice.
 */
export class PendingSettles {
  constructor(
    private readonly sql: Sql,
    private readonly ledger: Ledger,
  ) {}

  /** Keeps the settle for later. Never throws: when Postgres fails too, the error log carries the charge. */
  async record(p: PendingSettle): Promise<void> {
    try {
      await this.sql`INSERT INTO pending_settles ${this.sql(rowOf(p))} ON CONFLICT (hold_id) DO NOTHING`;
      metrics.settlesDeferred.inc();
      log.warn("settle deferred to Postgres; the repair job posts it when Redis answers", { hold: p.holdId, charge: p.charge });
    } catch (e) {
      log.error("CHARGE NOT RECORDED: Redis and Postgres both failed", { ...p, error: e });
    }
  }

  /**
   * Keeps settles that may need posting again (a failed-over master's last charges, RecentCharges): one insert,
   * one log line. Never throws: when Postgres fails, the error log carries them.
   */
  async recordMany(list: PendingSettle[]): Promise<void> {
    if (list.length === 0) return;
    const rows = list.map(rowOf);
    try {
      for (let i = 0; i < rows.length; i += 1000) {
        await this.sql`INSERT INTO pending_settles ${this.sql(rows.slice(i, i + 1000))} ON CONFLICT (hold_id) DO NOTHING`;
      }
      metrics.settlesDeferred.inc(list.length);
    } catch (e) {
      log.error("CHARGES NOT RECORDED: Postgres failed while keeping a lost master's charges", { settles: list, error: e });
    }
  }

  /** Whether Postgres's ledger holds the charge of `holdId` (the flusher inserted its event). */
  private async recorded(holdId: string): Promise<boolean> {
    const rows = await this.sql`SELECT 1 FROM ledger_events WHERE event_id = ${ledgerEventId("charge", holdId)}`;
    return rows.length > 0;
  }

  /** Posts every deferred settle; returns how many were posted or found already resolved. */
  async replay(): Promise<number> {
    const rows = await this.sql<
      {
        hold_id: string;
        wallet: string;
        api_key_id: number;
        charge_usdc: number;
        prompt_tokens: number;
        completion_tokens: number;
        cost_usd_micro: number;
        model: string;
        cached_prompt_tokens: number;
        cache_write_tokens: number;
        cache_write_1h_tokens: number;
        lease_id: string | null;
        lease_held: number | null;
      }[]
    >`SELECT * FROM pending_settles WHERE NOT unresolved ORDER BY created_at LIMIT 500`;
    for (const r of rows) {
      const details = {
        promptTokens: r.prompt_tokens,
        completionTokens: r.completion_tokens,
        costMicro: r.cost_usd_micro,
        model: r.model,
        cachedPromptTokens: r.cached_prompt_tokens,
        cacheWriteTokens: r.cache_write_tokens,
        cacheWrite1hTokens: r.cache_write_1h_tokens,
      };
      const p = this.ledger.principal(r.api_key_id, r.wallet);
      const outcome =
        r.lease_id === null
          ? await this.ledger.settleOutcome(p, r.hold_id, r.charge_usdc, details)
          : (await this.ledger.settleLeased(p, r.hold_id, r.charge_usdc, details, { id: r.lease_id, held: Number(r.lease_held ?? 0) }))
              .outcome;
      // An unknown hold whose charge Postgres has already (flushed before Redis lost the hold, and a rebuild from
      // Postgres carries it) misses nothing, so nothing for an operator (a failed-over master's last charges).
      if (outcome === "UNKNOWN_HOLD" && !(await this.recorded(r.hold_id))) {
        // Redis lost the hold: the charge stays here, marked, rather than being dropped.
        log.error("deferred settle: Redis no longer knows the hold; kept in pending_settles for an operator", {
          hold: r.hold_id,
          charge: r.charge_usdc,
        });
        await this.sql`UPDATE pending_settles SET unresolved = true WHERE hold_id = ${r.hold_id}`;
        continue;
      }
      await this.sql`DELETE FROM pending_settles WHERE hold_id = ${r.hold_id}`;
    }
    return rows.length;
  }
}
