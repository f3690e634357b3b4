import { Elysia, t } from "elysia";
import { requireWallet } from "../../auth/walletAuth.ts";
import type { Services } from "../../services.ts";
import { ErrorBody, Wallet } from "../schemas.ts";

/** GET /v1/topups/{wallet}: that wallet's top-ups, newest first (API key in header or `api_key`, or SIWE). */
export const topupsRoutes = (s: Services) =>
  new Elysia({ tags: ["topup"] }).get(
    "/v1/topups/:wallet",
    async ({ params, query, headers }) => {
      const wallet = params.wallet.toLowerCase();
      await requireWallet(s.apiKeyAuth, s.siwe, wallet, {
        authorization: headers.authorization ?? null,
        apiKeyQuery: query.api_key,
        message: query.message,
        signature: query.signature,
      });
      return s.topup.history(wallet);
    },
    {
      params: t.Object({ wallet: Wallet }),
      query: t.Object(
        { api_key: t.Optional(t.String()), message: t.Optional(t.String()), signature: t.Optional(t.String()) },
        { additionalProperties: true },
      ),
      response: {
        200: t.Object({
          wallet: t.String(),
          network: t.String(),
          topups: t.Array(t.Object({ id: t.Integer(), amount_usdc: t.Integer(), tx_hash: t.String(), created_at: t.String() })),
        }),
        401: ErrorBody,
      },
      detail: { summary: "Top-up history of a wallet (API key or SIWE of that wallet)" },
    },
  );
