import { Elysia, t } from "elysia";
import { requireWallet } from "../../auth/walletAuth.ts";
import type { Services } from "../services.ts";
import { doc, errors, EXAMPLE_WALLET, json, responses, SECURITY } from "../../openapi/document.ts";
import { queryString, Wallet } from "../schemas.ts";

/** GET /v1/topups/{wallet}: that wallet's top-ups, newest first (API key in header or `api_key`, or SIWE). */
export const topupHistoryRoutes = (s: Services) =>
  new Elysia({ tags: ["topup"] }).get(
    "/v1/topups/:wallet",
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
        apiKeyQuery: queryString(query.api_key),
        message: queryString(query.message),
        signature: queryString(query.signature),
      });
      return s.topup.history(wallet);
    },
    {
      params: t.Object({ wallet: Wallet }),
      detail: doc({
        summary: "Top-up history of a wallet (API key or SIWE of that wallet)",
        security: [SECURITY.apiKey, SECURITY.apiKeyQuery, SECURITY.siweQuery],
        responses: responses(
          {
            200: json("TopupsResponse", "Newest first", {
              wallet: EXAMPLE_WALLET,
              network: "Base",
              topups: [{ id: 7, amount_usdc: 5_000_000, tx_hash: `0x${"3c".repeat(32)}`, created_at: "2026-01-01T12:00:00.000Z" }],
            }),
          },
          errors("VALIDATION_ERROR", "UNAUTHORIZED"),
        ),
      }),
    },
  );
