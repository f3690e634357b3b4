import { Elysia, t } from "elysia";
import { ApiError } from "../../errors.ts";
import { parseUsd } from "../../money.ts";
import type { Services } from "../../services.ts";
import { ErrorBody } from "../schemas.ts";

const MIN_TOPUP_MICRO = 1_000_000;
// Far above any real top-up, and far below 2^53 µUSDC.
const MAX_TOPUP_MICRO = 1_000_000_000 * 1_000_000;

/** TopupRequest.amount (USD) → µUSDC: at least 1 USD, at most 6 decimals; 400 VALIDATION_ERROR otherwise. */
export function topupAmount(amount: number): number {
  const micro = Number.isFinite(amount) ? parseUsd(String(amount)) : null;
  if (micro === null) throw new ApiError("VALIDATION_ERROR", "amount: must be a USD amount with at most 6 decimals");
  if (micro < MIN_TOPUP_MICRO) throw new ApiError("VALIDATION_ERROR", "amount: the minimum top-up is 1 USD");
  if (micro > MAX_TOPUP_MICRO) throw new ApiError("VALIDATION_ERROR", "amount: the maximum top-up is 1,000,000,000 USD");
  return micro;
}

const PaymentRequirement = t.Object(
  {
    scheme: t.String(),
    network: t.String(),
    amount: t.String(),
    maxAmountRequired: t.String(),
    asset: t.String(),
    payTo: t.String(),
    extra: t.Record(t.String(), t.Unknown()),
  },
  { additionalProperties: true },
);

/**
 * POST /v1/topup, the x402 exchange: without a payment header 402 with the terms (body for x402 v1, the v2
 * PAYMENT-REQUIRED header); with `X-Payment` (v1) or `PAYMENT-SIGNATURE` (v2) verify, settle, credit, 200.
 */
export const topupRoutes = (s: Services) =>
  new Elysia({ tags: ["topup"] }).post(
    "/v1/topup",
    async ({ body, headers, request, set }) => {
      const micro = topupAmount(body.amount);
      const payment = headers["x-payment"] ?? headers["payment-signature"];
      const resource = new URL("/v1/topup", request.url).toString();
      const out = await s.topup.topup(micro, payment, resource);
      set.status = out.status;
      Object.assign(set.headers, out.headers);
      return out.body;
    },
    {
      parse: "json",
      body: t.Object({ amount: t.Number({ description: "USD to credit, minimum 1, at most 6 decimals" }) }),
      response: {
        200: t.Object({ balance_usdc: t.Integer(), credited_usdc: t.Integer() }),
        400: t.Union([ErrorBody, t.Object({ error: t.String() })]),
        402: t.Object({ x402Version: t.Integer(), error: t.Optional(t.String()), accepts: t.Array(PaymentRequirement) }, { additionalProperties: true }),
        503: t.Object({ error: t.String() }),
      },
      detail: {
        summary: "Top up a wallet with USDC (EIP-3009) or USDT (EIP-2612 permit) via x402",
        description:
          "Step 1 without X-Payment answers 402 with PaymentRequirements (and the x402 v2 PAYMENT-REQUIRED header). " +
          "Step 2 resends the request with X-Payment (or PAYMENT-SIGNATURE): 200 with the credit and X-PAYMENT-RESPONSE.",
      },
    },
  );
