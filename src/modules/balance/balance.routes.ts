import { Elysia, t } from "elysia";
import type { Services } from "../../services.ts";
import { Wallet } from "../schemas.ts";

/** GET /v1/balance/{wallet}: public available credit; an unknown wallet has 0. */
export const balanceRoutes = (s: Services) =>
  new Elysia({ tags: ["balance"] }).get(
    "/v1/balance/:wallet",
    async ({ params }) => {
      const wallet = params.wallet.toLowerCase();
      const { balance, locked } = await s.ledger.balance(wallet);
      return { wallet, available_usdc: balance - locked };
    },
    {
      params: t.Object({ wallet: Wallet }),
      response: { 200: t.Object({ wallet: t.String(), available_usdc: t.Integer() }) },
      detail: { summary: "Available credit of a wallet, µUSDC" },
    },
  );
