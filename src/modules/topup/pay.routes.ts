import { Elysia } from "elysia";
import type { Services } from "../services.ts";
import { requestBodies } from "../../openapi/docs.ts";
import { doc, errors, json, responses, SECURITY } from "../../openapi/document.ts";
import { topupAmount } from "./topup.service.ts";

const REF = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const HEADER = (name: string) => ({ $ref: `#/components/headers/${name}` });
const OFFER_EXAMPLE = {
  x402Version: 1,
  accepts: [
    {
      scheme: "exact",
      network: "base",
      amount: "5000000",
      maxAmountRequired: "5000000",
      resource: "https://gateway.example/v1/topup",
      description: "Top up 5 USD of gateway credit",
      mimeType: "application/json",
      payTo: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
      maxTimeoutSeconds: 300,
      asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
      extra: { name: "USD Coin", version: "2" },
    },
  ],
};

/**
 * POST /v1/topup, the x402 exchange: without a payment header 402 with the terms (body for x402 v1, the v2
 * PAYMENT-REQUIRED header); with `X-Payment` (v1) or `PAYMENT-SIGNATURE` (v2) verify, settle, credit, 200.
 */
export const topupPayRoutes = (s: Services) =>
  new Elysia({ tags: ["topup"] }).use(requestBodies).post(
    "/v1/topup",
    async ({ body, headers, set }) => {
      const micro = topupAmount(body.amount);
      const payment = headers["x-payment"] ?? headers["payment-signature"];
      const resource = `${s.config.publicUrl}/v1/topup`; // PUBLIC_URL, never the request's Host
      const out = await s.topup.topup(micro, payment, resource);
      set.status = out.status;
      Object.assign(set.headers, out.headers);
      return out.body;
    },
    {
      parse: "json",
      body: "TopupRequest",
      detail: doc({
        summary: "Top up a wallet with USDC (EIP-3009) or USDT (EIP-2612 permit) via x402",
        description:
          "Step 1 without a payment header answers 402 with PaymentRequirements (and the x402 v2 PAYMENT-REQUIRED header). " +
          "Step 2 resends the request with X-Payment (v1) or PAYMENT-SIGNATURE (v2): 200 with the credit and X-PAYMENT-RESPONSE / " +
          "PAYMENT-RESPONSE. Payment errors are PlainError bodies: match on the status.",
        security: [SECURITY.none, SECURITY.x402, SECURITY.x402V2],
        responses: responses(
          {
            200: json("TopupResponse", "Settled and credited", { balance_usdc: 5_000_000, credited_usdc: 5_000_000 }, [
              "X-PAYMENT-RESPONSE",
              "PAYMENT-RESPONSE",
              "Cache-Control",
            ]),
          },
          {
            400: {
              description: "VALIDATION_ERROR (amount), or a PlainError for a payment that cannot be decoded or does not match",
              headers: { "X-Request-Id": HEADER("X-Request-Id") },
              content: {
                "application/json": {
                  schema: { oneOf: [REF("Error"), REF("PlainError")] },
                  examples: {
                    VALIDATION_ERROR: { value: { error: "VALIDATION_ERROR", message: "amount: the minimum top-up is 1 USD" } },
                    payment: { value: { error: "payment does not match the requirements" } },
                  },
                },
              },
            },
            402: {
              description: "Payment required: the terms (step 1), or a payment the facilitator refused (error says why)",
              headers: {
                "X-Request-Id": HEADER("X-Request-Id"),
                "PAYMENT-REQUIRED": HEADER("PAYMENT-REQUIRED"),
                "Cache-Control": HEADER("Cache-Control"),
              },
              content: { "application/json": { schema: REF("PaymentRequirements"), example: OFFER_EXAMPLE } },
            },
            503: {
              description: "Payment facilitator unreachable, or top-ups not configured",
              headers: { "X-Request-Id": HEADER("X-Request-Id") },
              content: { "application/json": { schema: REF("PlainError"), example: { error: "payment facilitator unavailable" } } },
            },
          },
          errors("INTERNAL_ERROR", "REQUEST_TIMEOUT", "PAYLOAD_TOO_LARGE"),
        ),
      }),
    },
  );
