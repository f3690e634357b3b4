import type { Address } from "viem";
import { getAddress } from "./address.ts";
import { type Asset, type PaymentNetwork, toAtomic, type TransferMethod } from "./networks.ts";

/** Seconds a signed authorization may stay open (clients set validBefore / deadline = now + this). */
export const MAX_TIMEOUT_SECONDS = 300;

/** `extra.assetTransferMethod` of a permit asset: not one x402's own clients know, so they never sign it blind. */
export const PERMIT_TRANSFER_METHOD = "eip2612";
/** `extra.assetTransferMethod` of x402's own Permit2 flow: how `@x402/evm` pays tokens without EIP-3009. */
export const PERMIT2_TRANSFER_METHOD = "permit2";

/**
 * How a payment for one requirement moves the token: the asset's own method (`eip3009`, `permit`: see
 * TransferMethod), or x402's Permit2 flow (`permit2`), offered for permit assets beside the gateway's permit path.
 */
export type PaymentMethod = TransferMethod | "permit2";

/**
 * x402's `eip2612GasSponsoring` extension (x402 specs/extensions/eip2612_gas_sponsoring.md), declared in the v2
 * terms when Permit2 is offered: a payer whose Permit2 allowance is short then also signs an EIP-2612 permit for
 * Permit2, and the in-process facilitator submits both in one transaction (the proxy's settleWithPermit), so
 * paying needs neither gas nor a prior approval.
 */
export const EIP2612_GAS_SPONSORING = {
  eip2612GasSponsoring: {
    info: { description: "The facilitator accepts EIP-2612 gasless Permit to `Permit2` canonical contract.", version: "1" },
    schema: {
      $schema: "https://json-schema.org/draft/2020-12/schema",
      type: "object",
      properties: Object.fromEntries(
        [
          ["from", "^0x[a-fA-F0-9]{40}$"],
          ["asset", "^0x[a-fA-F0-9]{40}$"],
          ["spender", "^0x[a-fA-F0-9]{40}$"],
          ["amount", "^[0-9]+$"],
          ["nonce", "^[0-9]+$"],
          ["deadline", "^[0-9]+$"],
          ["signature", "^0x[a-fA-F0-9]+$"],
          ["version", "^[0-9]+(\\.[0-9]+)*$"],
        ].map(([k, pattern]) => [k, { type: "string", pattern }]),
      ),
      required: ["from", "asset", "spender", "amount", "nonce", "deadline", "signature", "version"],
    },
  },
} as const;

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

/** x402 v2 requirement, as the PAYMENT-REQUIRED header carries it (`upto`: a keyless call's, callOffer). */
export interface RequirementV2 {
  scheme: "exact" | "upto";
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
  method: PaymentMethod;
  atomic: bigint;
  v1: RequirementV1;
  v2: RequirementV2;
}

export interface Offer {
  requirements: Requirement[];
  /** The 402 body (x402 v1 shape; docs/payments.md "Top-ups (x402)"). */
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
 * A permit asset is also offered through x402's Permit2 flow, in the v2 terms only (x402 v1 clients have no
 * Permit2) and ahead of its permit entry: `@x402/evm` takes the first entry its spend controls and policies
 * leave, and would sign a permit entry as EIP-3009.
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
  const entry = (asset: Asset, atomic: bigint, method: PaymentMethod): Requirement => {
    const extra: Record<string, unknown> = {
      name: asset.eip712Name,
      version: asset.eip712Version,
      symbol: asset.symbol,
      decimals: asset.decimals,
    };
    if (method === "permit") Object.assign(extra, { assetTransferMethod: PERMIT_TRANSFER_METHOD, spender: relayer });
    if (method === "permit2") extra.assetTransferMethod = PERMIT2_TRANSFER_METHOD;
    const amount = atomic.toString();
    return {
      asset,
      method,
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
    };
  };
  for (const asset of offeredOrder(net.assets)) {
    const atomic = toAtomic(microUsdc, asset.decimals);
    if (atomic === null) continue;
    if (asset.transfer === "permit" && !relayer) continue;
    if (asset.transfer === "permit") requirements.push(entry(asset, atomic, "permit2"));
    requirements.push(entry(asset, atomic, asset.transfer));
  }
  const v2: Offer["v2"] = {
    x402Version: 2,
    resource: { url: resource, description, mimeType: "application/json" },
    accepts: requirements.map((r) => r.v2),
    extensions: { [PAYMENT_IDENTIFIER]: structuredClone(PAYMENT_IDENTIFIER_DECLARATION) },
  };
  if (requirements.some((r) => r.method === "permit2")) Object.assign(v2.extensions, structuredClone(EIP2612_GAS_SPONSORING));
  return {
    requirements,
    body: { x402Version: 1, accepts: requirements.filter((r) => r.method !== "permit2").map((r) => r.v1) },
    v2,
  };
}

/** Base64 of JSON, the encoding of every x402 header. */
export function encodeHeader(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString("base64");
}

/** `@x402/evm`'s Permit2 proxy for `upto`, the spender its clients sign for (test/payments.address.unit.test.ts pins it). */
export const X402_UPTO_PERMIT2_PROXY = "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002";

/** The terms of a keyless call: `exact` entries as any offer's, and the `upto` entry ahead of them when one is made. */
export type CallOffer = Offer & { upto?: RequirementV2 };

/**
 * The terms of a model call made without an API key (paycall/keyless.ts): USDC only, the call's hold exactly. First
 * `upto` (Permit2; offered when the in-process facilitator, `relayer`, settles it: `extra.facilitatorAddress` names it,
 * and only it may settle), then `exact` (EIP-3009). With `upto`, the v2 terms also declare x402's eip2612GasSponsoring,
 * so a payer without a Permit2 allowance signs an EIP-2612 permit for it and pays no gas. `extensions` gets the
 * sign-in-with-x challenge from the caller.
 */
export function callOffer(
  net: PaymentNetwork,
  payTo: Address,
  microUsdc: number,
  resource: string,
  description: string,
  relayer?: Address,
): CallOffer {
  const all = buildOffer(net, payTo, microUsdc, resource, relayer, description);
  const requirements = all.requirements.filter((r) => r.asset.symbol === "USDC" && r.method === "eip3009");
  const exact = requirements[0]?.v2;
  const upto: RequirementV2 | undefined =
    exact && relayer
      ? {
          ...exact,
          scheme: "upto",
          extra: { ...exact.extra, assetTransferMethod: PERMIT2_TRANSFER_METHOD, facilitatorAddress: getAddress(relayer) },
        }
      : undefined;
  const extensions: Record<string, unknown> = { [PAYMENT_IDENTIFIER]: structuredClone(PAYMENT_IDENTIFIER_DECLARATION) };
  if (upto) Object.assign(extensions, structuredClone(EIP2612_GAS_SPONSORING));
  return {
    requirements,
    upto,
    body: { x402Version: 1, accepts: requirements.map((r) => r.v1) },
    v2: { ...all.v2, accepts: [...(upto ? [upto] : []), ...requirements.map((r) => r.v2)], extensions },
  };
}
