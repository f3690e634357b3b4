import { Elysia, t } from "elysia";
import { requireWallet } from "../../auth/walletAuth.ts";
import type { Services } from "../services.ts";
import type { Sql } from "../../store/db.ts";
import { doc, errors, EXAMPLE_WALLET, json, queryParam, responses, SECURITY } from "../../openapi/document.ts";
import { Wallet } from "../schemas.ts";

const DAY_MS = 86_400_000;

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
      detail: doc({
        summary: "Spend per day and API key of a wallet (API key or SIWE of that wallet)",
        description:
          "Charges per UTC day and key over the last `days` days (today included), every day listed. Read from the system of " +
          "record, which the ledger's outbox feeds within about a second, so a charge made a moment ago may not be counted yet; " +
          "GET /v1/usage/{wallet} has the live totals.",
        security: [SECURITY.apiKey, SECURITY.siweQuery],
        parameters: [
          { name: "days", in: "query", required: false, description: "Days back, today included (default 30)", schema: { type: "integer", minimum: 1, maximum: 366 } },
          queryParam("message", "SIWE message (with signature), instead of an API key", false),
          queryParam("signature", "Signature of the SIWE message", false),
        ],
        responses: responses(
          {
            200: json("DailyUsageResponse", "Dense: every day of the range", {
              wallet: EXAMPLE_WALLET,
              from: "2026-11-22",
              to: "2026-11-23",
              days: [
                { date: "2026-11-22", total_charged_usdc: 0, keys: [] },
                {
                  date: "2026-11-23",
                  total_charged_usdc: 129,
                  keys: [{ api_key_id: 42, request_count: 3, total_prompt_tokens: 27, total_completion_tokens: 6, total_charged_usdc: 129 }],
                },
              ],
            }),
          },
          errors("VALIDATION_ERROR", "UNAUTHORIZED"),
        ),
      }),
    },
  );
