import { Elysia, t } from "elysia";
import { requireWallet } from "../../auth/walletAuth.ts";
import type { Services } from "../../services.ts";
import type { Sql } from "../../store/db.ts";
import { ErrorBody, Wallet } from "../schemas.ts";

const DAY_MS = 86_400_000;

/** One key's spend on one day; the field names are UsageKey's, so clients read both alike. */
const DailyKey = t.Object({
  api_key_id: t.Integer(),
  request_count: t.Integer(),
  total_prompt_tokens: t.Integer(),
  total_completion_tokens: t.Integer(),
  total_charged_usdc: t.Integer({ description: "µUSDC" }),
});

const DailyUsage = t.Object({
  wallet: t.String(),
  from: t.String({ description: "First day (UTC, YYYY-MM-DD)" }),
  to: t.String({ description: "Last day (UTC, YYYY-MM-DD): today" }),
  days: t.Array(
    t.Object({
      date: t.String({ description: "UTC day, YYYY-MM-DD" }),
      total_charged_usdc: t.Integer({ description: "µUSDC, all keys" }),
      keys: t.Array(DailyKey, { description: "Keys that were charged that day, by id" }),
    }),
    { description: "Every day of the range, oldest first, days without charges included (keys empty)" },
  ),
});

type DailyRow = { day: string; api_key_id: number; requests: number; prompt: number; completion: number; charged: number };

/**
 * Charges of a wallet per UTC day and key over the last `days` days, from Postgres (the system of record): the
 * dashboard's spend chart. Dense, so a client draws it without filling gaps.
 */
export async function dailyUsage(sql: Sql, wallet: string, days: number, now = new Date()) {
  const today = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate());
  const from = new Date(today - (days - 1) * DAY_MS);
  const rows = await sql<DailyRow[]>`
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

/** GET /v1/usage/{wallet}/daily: spend per day and key (API key or SIWE of that wallet, like /v1/usage/{wallet}). */
export const dailyUsageRoutes = (s: Services) =>
  new Elysia({ tags: ["usage"] }).get(
    "/v1/usage/:wallet/daily",
    async ({ params, query, headers }) => {
      const wallet = params.wallet.toLowerCase();
      await requireWallet(s.apiKeyAuth, s.siwe, wallet, {
        authorization: headers.authorization ?? null,
        message: query.message,
        signature: query.signature,
      });
      return dailyUsage(s.sql, wallet, query.days ?? 30);
    },
    {
      params: t.Object({ wallet: Wallet }),
      query: t.Object(
        {
          days: t.Optional(t.Integer({ minimum: 1, maximum: 366, description: "Days back, today included (default 30)" })),
          message: t.Optional(t.String()),
          signature: t.Optional(t.String()),
        },
        { additionalProperties: true },
      ),
      response: { 200: DailyUsage, 400: ErrorBody, 401: ErrorBody },
      detail: {
        summary: "Spend per day and API key of a wallet (API key or SIWE of that wallet)",
        description:
          "Charges per UTC day and key over the last `days` days (today included), every day listed. Read from the system of " +
          "record, which the ledger's outbox feeds within about a second, so a charge made a moment ago may not be counted yet; " +
          "GET /v1/usage/{wallet} has the live totals.",
      },
    },
  );
