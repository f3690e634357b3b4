import { Elysia, t } from "elysia";
import { requireWallet } from "../../auth/walletAuth.ts";
import type { Services } from "../services.ts";
import { doc, errors, EXAMPLE_WALLET, json, responses, SECURITY } from "../../openapi/document.ts";
import { queryString, Wallet } from "../schemas.ts";

const COUNTERS = ["requests", "prompt_tokens", "completion_tokens", "spent", "revenue"] as const;

/** GET /v1/usage/{wallet}: balance and per-key counters, live from the Redis ledger. */
export const usageRoutes = (s: Services) =>
  new Elysia({ tags: ["usage"] }).get(
    "/v1/usage/:wallet",
    async ({ params, query, headers }: { params: { wallet: string }; query: Record<string, unknown>; headers: Record<string, string | undefined> }) => {
      const wallet = params.wallet.toLowerCase();
      await requireWallet(s.apiKeyAuth, s.siwe, wallet, {
        authorization: headers.authorization ?? null,
        message: queryString(query.message),
        signature: queryString(query.signature),
      });
      const keys = await s.keys.list(wallet);
      const [{ balance, locked }, counters] = await Promise.all([
        s.ledger.balance(wallet),
        s.ledger.keyCounters(keys.map((k) => s.ledger.principal(k.id, wallet)), COUNTERS),
      ]);
      return {
        wallet,
        balance_usdc: balance,
        locked_usdc: locked,
        available_usdc: balance - locked,
        keys: keys.map((k, i) => {
          const [requests = 0, pt = 0, ct = 0, spent = 0, revenue = 0] = counters[i]!;
          return {
            api_key_id: k.id,
            label: k.label,
            request_count: requests,
            total_prompt_tokens: pt,
            total_completion_tokens: ct,
            total_charged_usdc: spent,
            total_platform_revenue_usd: revenue / 1_000_000,
          };
        }),
      };
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
