import { type TSchema, Type as T } from "@sinclair/typebox";
import { closed, DateTime, Int, Micro, ref, WalletString } from "./common.ts";

/** Top-ups: the x402 payment terms, the credited answer and the history. */

/** Also what Elysia validates a top-up request with (REQUEST_BODIES); open to unknown fields, as it always was. */
export const TopupRequest = T.Object({ amount: T.Number({ description: "USD to credit: at least 1, at most 6 decimals", examples: [5] }) });

/** The top-up schemas, in the order the document lists them. */
export const TOPUP_SCHEMAS = {
  TopupRequest,
  PaymentRequirement: T.Object(
    {
      scheme: T.String({ examples: ["exact"] }),
      network: T.String({ description: "Chain identifier (x402 v1 name)" }),
      amount: T.String({ pattern: "^[0-9]+$", description: "Integer amount in the asset's smallest unit" }),
      maxAmountRequired: T.String({ pattern: "^[0-9]+$", description: "Same as amount (x402 v1 name)" }),
      asset: T.String({ description: "Token contract address" }),
      payTo: T.String({ description: "Recipient address" }),
      resource: T.Optional(T.String()),
      description: T.Optional(T.String()),
      mimeType: T.Optional(T.String()),
      maxTimeoutSeconds: T.Optional(Int()),
      extra: T.Record(T.String(), T.Unknown(), { description: "EIP-712 name and version; permit assets: assetTransferMethod, spender" }),
    },
    { additionalProperties: true },
  ),
  PaymentRequirements: T.Object(
    {
      x402Version: T.Integer({ examples: [1] }),
      error: T.Optional(T.String({ description: "Why a presented payment was refused" })),
      accepts: T.Array(ref("PaymentRequirement")),
    },
    { additionalProperties: true, description: "402 body of a top-up: x402 v1 (the v2 terms are in PAYMENT-REQUIRED)" },
  ),
  TopupResponse: T.Object(
    { balance_usdc: Micro("New balance"), credited_usdc: Micro("Amount credited (0 for a payment credited before)") },
    closed,
  ),
  TopupRecord: T.Object(
    { id: Int(), amount_usdc: Micro("Amount"), tx_hash: T.String({ description: "Settlement transaction" }), created_at: DateTime },
    closed,
  ),
  TopupsResponse: T.Object(
    { wallet: WalletString, network: T.String({ description: "Settlement network name" }), topups: T.Array(ref("TopupRecord")) },
    closed,
  ),
} satisfies Record<string, TSchema>;
