import { Elysia, t } from "elysia";
import { requireWallet } from "../../auth/walletAuth.ts";
import type { Services } from "../services.ts";
import { doc, errors, EXAMPLE_WALLET, json, queryParam, responses, SECURITY } from "../../openapi/document.ts";
import { Wallet } from "../schemas.ts";

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
      return s.usage.daily(wallet, query.days ?? 30);
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
          {
            name: "days",
            in: "query",
            required: false,
            description: "Days back, today included (default 30)",
            schema: { type: "integer", minimum: 1, maximum: 366 },
          },
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
                  keys: [
                    { api_key_id: 42, request_count: 3, total_prompt_tokens: 27, total_completion_tokens: 6, total_charged_usdc: 129 },
                  ],
                },
              ],
            }),
          },
          errors("VALIDATION_ERROR", "UNAUTHORIZED"),
        ),
      }),
    },
  );
