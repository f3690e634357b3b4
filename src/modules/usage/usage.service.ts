import type { Ledger } from "../../ledger/ledger.ts";
import type { Sql } from "../../store/db.ts";
import type { KeyService } from "../keys/keys.service.ts";

const COUNTERS = [
  "requests",
  "prompt_tokens",
  "completion_tokens",
  "spent",
  "revenue",
  "cached_prompt_tokens",
  "cache_write_tokens",
] as const;
const DAY_MS = 86_400_000;

type DailyRow = { day: string; api_key_id: number; requests: number; prompt: number; completion: number; charged: number };

/**
 * What a wallet has spent: live totals from the Redis ledger (the hot path's own counters) and spend per day from
 * Postgres (the system of record, which keeps every charge with its time).
 */
export class UsageService {
  constructor(
    private readonly ledger: Ledger,
    private readonly keys: KeyService,
    private readonly sql: Sql,
  ) {}

  /** Balance and per-key counters of a wallet, live from the ledger (GET /v1/usage/{wallet}). */
  async live(wallet: string) {
    const keys = await this.keys.list(wallet);
    const [{ balance, locked }, counters] = await Promise.all([
      this.ledger.reads.balance(wallet),
      this.ledger.reads.keyCounters(
        keys.map((k) => this.ledger.principal(k.id, wallet)),
        COUNTERS,
      ),
    ]);
    return {
      wallet,
      balance_usdc: balance,
      locked_usdc: locked,
      available_usdc: balance - locked,
      keys: keys.map((k, i) => {
        const [requests = 0, pt = 0, ct = 0, spent = 0, revenue = 0, cached = 0, written = 0] = counters[i]!;
        return {
          api_key_id: k.id,
          label: k.label,
          request_count: requests,
          total_prompt_tokens: pt,
          total_completion_tokens: ct,
          // Of total_prompt_tokens: read from the provider's cache, and written to it (5-minute and 1-hour writes).
          total_cached_prompt_tokens: cached,
          total_cache_write_tokens: written,
          total_charged_usdc: spent,
          total_platform_revenue_usd: revenue / 1_000_000,
        };
      }),
    };
  }

  /**
   * Charges of a wallet per UTC day and key over the last `days` days (the dashboard's spend chart). Dense, so a
   * client draws it without filling gaps.
   */
  async daily(wallet: string, days: number, now = new Date()) {
    const today = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate());
    const from = new Date(today - (days - 1) * DAY_MS);
    const rows = await this.sql<DailyRow[]>`
      SELECT to_char(occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, api_key_id,
             count(*)::int AS requests, sum(prompt_tokens)::bigint AS prompt,
             sum(completion_tokens)::bigint AS completion, sum(amount_usdc)::bigint AS charged
      FROM ledger_events
      WHERE wallet = ${wallet} AND type = 'charge' AND occurred_at >= ${from}
      GROUP BY 1, 2 ORDER BY 1, 2`;
    const byDay = new Map<string, DailyRow[]>();
    for (const r of rows) byDay.set(r.day, [...(byDay.get(r.day) ?? []), r]);
    const out = [];
    for (let i = 0; i < days; i++) {
      const date = new Date(from.getTime() + i * DAY_MS).toISOString().slice(0, 10);
      const keys = (byDay.get(date) ?? []).map((r) => ({
        api_key_id: r.api_key_id,
        request_count: r.requests,
        total_prompt_tokens: r.prompt,
        total_completion_tokens: r.completion,
        total_charged_usdc: r.charged,
      }));
      out.push({ date, total_charged_usdc: keys.reduce((s, k) => s + k.total_charged_usdc, 0), keys });
    }
    return { wallet, from: out[0]!.date, to: out[out.length - 1]!.date, days: out };
  }
}
