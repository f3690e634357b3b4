import { getAddress, type Address } from "viem";
import { type Asset, type PaymentNetwork, toAtomic } from "./networks.ts";

/** Seconds a signed authorization may stay open (clients set validBefore / deadline = now + this). */
export const MAX_TIMEOUT_SECONDS = 300;

/** `extra.assetTransferMethod` of a permit asset: not one x402's own clients know, so they never sign it blind. */
export const PERMIT_TRANSFER_METHOD = "eip2612";

/** x402 v1 requirement, as the 402 body carries it (plus `amount`, which v2 readers of the body use). */
export interface RequirementV1 {
  scheme: "exact";
  network: string;
  maxAmountRequired: string;
  amount: string;
  resource: string;
  description: string;
  mimeType: string;
  payTo: Address;
  maxTimeoutSeconds: number;
  asset: Address;
  extra: Record<string, unknown>;
}

/** x402 v2 requirement, as the PAYMENT-REQUIRED header carries it. */
export interface RequirementV2 {
  scheme: "exact";
  network: string;
  amount: string;
  asset: Address;
  payTo: Address;
  maxTimeoutSeconds: number;
  extra: Record<string, unknown>;
}

/** What step 1 asks for one asset: the same terms in both protocol versions. */
export interface Requirement {
  asset: Asset;
  atomic: bigint;
  v1: RequirementV1;
  v2: RequirementV2;
}

export interface Offer {
  requirements: Requirement[];
  /** The 402 body (x402 v1 shape; design §6). */
  body: { x402Version: 1; error?: string; accepts: RequirementV1[] };
  /** The v2 PaymentRequired object (base64 JSON in the PAYMENT-REQUIRED header). */
  v2: {
    x402Version: 2;
    error?: string;
    resource: { url: string; description: string; mimeType: string };
    accepts: RequirementV2[];
    extensions: Record<string, unknown>;
  };
}

/** x402's `payment-identifier` extension: a client may name its payment with an id, and a resend gets the first result. */
export const PAYMENT_IDENTIFIER = "payment-identifier";
const PAYMENT_IDENTIFIER_DECLARATION = {
  info: { required: false },
  schema: {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    type: "object",
    properties: { required: { type: "boolean" }, id: { type: "string", minLength: 16, maxLength: 128 } },
    required: ["required"],
  },
};

/** USDC first (what most x402 clients pick), then the other assets in the table's order. */
function offeredOrder(assets: Asset[]): Asset[] {
  return [...assets.filter((a) => a.symbol === "USDC"), ...assets.filter((a) => a.symbol !== "USDC")];
}

/**
 * The payment terms for a top-up of `microUsdc`: one entry per accepted asset of the network, the amount in
 * the asset's own smallest unit. `relayer` is the spender permit assets name (the in-process facilitator).
 */
export function buildOffer(
  net: PaymentNetwork,
  payTo: Address,
  microUsdc: number,
  resource: string,
  relayer?: Address,
  description = `Top up ${microUsdc / 1_000_000} USD of gateway credit`,
): Offer {
  payTo = getAddress(payTo);
  const requirements: Requirement[] = [];
  for (const asset of offeredOrder(net.assets)) {
    const atomic = toAtomic(microUsdc, asset.decimals);
    if (atomic === null) continue;
    if (asset.transfer === "permit" && !relayer) continue;
    const extra: Record<string, unknown> = {
      name: asset.eip712Name,
      version: asset.eip712Version,
      symbol: asset.symbol,
      decimals: asset.decimals,
    };
    if (asset.transfer === "permit") Object.assign(extra, { assetTransferMethod: PERMIT_TRANSFER_METHOD, spender: relayer });
    const amount = atomic.toString();
    requirements.push({
      asset,
      atomic,
      v1: {
        scheme: "exact",
        network: net.v1Name ?? net.caip2,
        maxAmountRequired: amount,
        amount,
        resource,
        description,
        mimeType: "application/json",
        payTo,
        maxTimeoutSeconds: MAX_TIMEOUT_SECONDS,
        asset: asset.address,
        extra,
      },
      v2: { scheme: "exact", network: net.caip2, amount, asset: asset.address, payTo, maxTimeoutSeconds: MAX_TIMEOUT_SECONDS, extra },
    });
  }
  return {
    requirements,
    body: { x402Version: 1, accepts: requirements.map((r) => r.v1) },
    v2: {
      x402Version: 2,
      resource: { url: resource, description, mimeType: "application/json" },
      accepts: requirements.map((r) => r.v2),
      extensions: { [PAYMENT_IDENTIFIER]: PAYMENT_IDENTIFIER_DECLARATION },
    },
  };
}

/** Base64 of JSON, the encoding of every x402 header. */
export function encodeHeader(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString("base64");
}
