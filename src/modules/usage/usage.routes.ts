import { Elysia, t } from "elysia";
import { requireWallet } from "../../auth/walletAuth.ts";
import type { Services } from "../services.ts";
import { doc, errors, EXAMPLE_WALLET, json, responses, SECURITY } from "../../openapi/document.ts";
import { queryString, Wallet } from "../schemas.ts";

/** GET /v1/usage/{wallet}: balance and per-key counters, live from the Redis ledger. */
export const usageRoutes = (s: Services) =>
  new Elysia({ tags: ["usage"] }).get(
    "/v1/usage/:wallet",
    async ({
      params,
      query,
      headers,
    }: {
      params: { wallet: string };
      query: Record<string, unknown>;
      headers: Record<string, string | undefined>;
    }) => {
      const wallet = params.wallet.toLowerCase();
      await requireWallet(s.apiKeyAuth, s.siwe, wallet, {
        authorization: headers.authorization ?? null,
        message: queryString(query.message),
        signature: queryString(query.signature),
      });
      return s.usage.live(wallet);
    },
    {
      params: t.Object({ wallet: Wallet }),
      detail: doc({
        summary: "Usage per API key and balance of a wallet (API key or SIWE of that wallet)",
        security: [SECURITY.apiKey, SECURITY.siweQuery],
        responses: responses(
          {
            200: json("UsageResponse", "Live from the ledger", {
              wallet: EXAMPLE_WALLET,
              balance_usdc: 5_000_000,
              locked_usdc: 10_290,
              available_usdc: 4_989_710,
              keys: [
                {
                  api_key_id: 42,
                  label: "laptop",
                  request_count: 3,
                  total_prompt_tokens: 27,
                  total_completion_tokens: 6,
                  total_charged_usdc: 129,
                  total_platform_revenue_usd: 0.000026,
                },
              ],
            }),
          },
          errors("VALIDATION_ERROR", "UNAUTHORIZED"),
        ),
      }),
    },
  );
