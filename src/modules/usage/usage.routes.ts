import { Elysia, t } from "elysia";
import { requireWallet } from "../../auth/walletAuth.ts";
import type { Services } from "../../services.ts";
import { ErrorBody, SiweQuery, Wallet } from "../schemas.ts";

const COUNTERS = ["requests", "prompt_tokens", "completion_tokens", "spent", "revenue"] as const;

/** GET /v1/usage/{wallet}: balance and per-key counters, live from the Redis ledger. */
export const usageRoutes = (s: Services) =>
  new Elysia({ tags: ["usage"] }).get(
    "/v1/usage/:wallet",
    async ({ params, query, headers }) => {
      const wallet = params.wallet.toLowerCase();
      await requireWallet(s.apiKeyAuth, s.siwe, wallet, {
        authorization: headers.authorization ?? null,
        message: query.message,
        signature: query.signature,
      });
      const keys = await s.keys.list(wallet);
      const [{ balance, locked }, counters] = await Promise.all([
        s.ledger.balance(wallet),
        s.ledger.keyCounters(keys.map((k) => s.ledger.principal(k.id, wallet).apiKeyKey), COUNTERS),
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
      query: SiweQuery,
      response: { 401: ErrorBody },
      detail: { summary: "Usage per API key and balance of a wallet (API key or SIWE of that wallet)" },
    },
  );
