import { Elysia, t } from "elysia";
import { doc, errors, EXAMPLE_WALLET, json, responses } from "../../openapi/document.ts";
import type { Services } from "../services.ts";
import { Wallet } from "../schemas.ts";

/** GET /v1/balance/{wallet}: public available credit; an unknown wallet has 0. */
export const balanceRoutes = (s: Services) =>
  new Elysia({ tags: ["balance"] }).get(
    "/v1/balance/:wallet",
    async ({ params }) => {
      const wallet = params.wallet.toLowerCase();
      const { balance, locked } = await s.ledger.reads.balance(wallet);
      return { wallet, available_usdc: balance - locked };
    },
    {
      params: t.Object({ wallet: Wallet }),
      detail: doc({
        summary: "Available credit of a wallet, µUSDC",
        responses: responses(
          {
            200: json("BalanceResponse", "Balance minus locked; 0 for an unknown wallet", {
              wallet: EXAMPLE_WALLET,
              available_usdc: 4_250_000,
            }),
          },
          errors("VALIDATION_ERROR"),
        ),
      }),
    },
  );
