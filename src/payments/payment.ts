import type { Address, Hex } from "viem";
import { BareError } from "../errors.ts";
import { getAddress, isAddress } from "./address.ts";
import { type Asset, fromAtomic, type PaymentNetwork } from "./networks.ts";
import type { Requirement } from "./requirements.ts";
import { TRANSFER_WITH_AUTHORIZATION_TYPES } from "./typedData.ts";

/** EIP-3009 authorization, as x402 `exact` carries it. */
export interface Eip3009Payload {
  signature: Hex;
  authorization: { from: Address; to: Address; value: string; validAfter: string; validBefore: string; nonce: Hex };
}

/** EIP-2612 permit (the gateway's permit path): the relayer is the spender, then transfers to PAY_TO. */
export interface PermitPayload {
  signature: Hex;
  permit: { owner: Address; spender: Address; value: string; nonce: string; deadline: string };
}

/**
 * x402's Permit2 flow (`@x402/evm`): a Permit2 PermitWitnessTransferFrom for x402's exact proxy as spender, the
 * witness binding the recipient. An EIP-2612 permit for Permit2 may ride along in `extensions` (gas sponsoring).
 */
export interface Permit2Payload {
  signature: Hex;
  permit2Authorization: {
    from: Address;
    permitted: { token: Address; amount: string };
    spender: Address;
    nonce: string;
    deadline: string;
    witness: { to: Address; validAfter: string };
  };
}

/** The signed transfer a payment carries, by how it moves the token (the requirement's PaymentMethod). */
export type SignedTransfer =
  { kind: "eip3009"; inner: Eip3009Payload } | { kind: "permit"; inner: PermitPayload } | { kind: "permit2"; inner: Permit2Payload };

/** A decoded X-Payment / PAYMENT-SIGNATURE that matches one requirement of this top-up. */
export type MatchedPayment = SignedTransfer & {
  x402Version: 1 | 2;
  requirement: Requirement;
  /** The payment payload as the facilitator expects it for this version. */
  payload: Record<string, unknown>;
  /** The requirement in the same protocol version as the payload. */
  requirements: Record<string, unknown>;
  /** The paying wallet (lower-case): it is credited. */
  payer: string;
  /** Network name as the client's protocol version writes it (for the payment-response header). */
  network: string;
};

/**
 * x402's exact Permit2 proxy, the spender a Permit2 payment names (`x402ExactPermit2ProxyAddress` of `@x402/evm`,
 * which a gateway that takes no payment does not load; test/payments.address.unit.test.ts checks they agree).
 */
export const X402_PERMIT2_PROXY = "0x402085c248EeA27D92E8b30b2C58ed07f9E20001";

const UINT = /^\d{1,78}$/;
const HEX32 = /^0x[0-9a-fA-F]{64}$/;

export const mismatched = (why: string) => new BareError(400, `mismatched payment: ${why}`);

const same = (a: unknown, b: string) => typeof a === "string" && a.toLowerCase() === b.toLowerCase();
const obj = (v: unknown): Record<string, unknown> | undefined =>
  typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;

function readInner(p: Record<string, unknown> | undefined): SignedTransfer {
  if (!p || typeof p.signature !== "string") throw mismatched("no signed authorization in the payload");
  const auth = obj(p.authorization);
  const permit = obj(p.permit);
  const permit2 = obj(p.permit2Authorization);
  if (auth) {
    const a = auth as Record<string, string>;
    if (![a.value, a.validAfter, a.validBefore].every((x) => typeof x === "string" && UINT.test(x)) || !HEX32.test(String(a.nonce))) {
      throw mismatched("malformed authorization");
    }
    return { kind: "eip3009", inner: p as unknown as Eip3009Payload };
  }
  if (permit) {
    const a = permit as Record<string, string>;
    if (![a.value, a.nonce, a.deadline].every((x) => typeof x === "string" && UINT.test(x))) throw mismatched("malformed permit");
    return { kind: "permit", inner: p as unknown as PermitPayload };
  }
  if (permit2) {
    const a = permit2 as Record<string, string>;
    const permitted = obj(permit2.permitted) as Record<string, string> | undefined;
    const witness = obj(permit2.witness) as Record<string, string> | undefined;
    const uints = [a.nonce, a.deadline, permitted?.amount, witness?.validAfter];
    const addresses = [a.spender, permitted?.token, witness?.to];
    if (!uints.every((x) => typeof x === "string" && UINT.test(x)) || !addresses.every((x) => typeof x === "string" && isAddress(x))) {
      throw mismatched("malformed permit2 authorization");
    }
    return { kind: "permit2", inner: p as unknown as Permit2Payload };
  }
  throw mismatched("unknown payload type");
}

/** The payer of a payload, or 400 when it is not a valid address (spec: undecodable wallet address). */
function payerOf(m: SignedTransfer): string {
  const raw =
    m.kind === "eip3009" ? m.inner.authorization.from : m.kind === "permit" ? m.inner.permit.owner : m.inner.permit2Authorization.from;
  if (typeof raw !== "string" || !/^0x[0-9a-fA-F]{40}$/.test(raw) || !isAddress(raw)) throw new BareError(400, "invalid payer address");
  return raw.toLowerCase();
}

/**
 * Checks the signed transfer moves exactly this requirement's amount to PAY_TO (or to the relayer, for a permit;
 * through x402's proxy, for Permit2).
 */
function checkTerms(m: SignedTransfer, r: Requirement): void {
  if (m.kind !== r.method) throw mismatched(`${r.asset.symbol} is paid by ${r.method}`);
  if (m.kind === "eip3009") {
    const a = m.inner.authorization;
    if (!same(a.to, r.v2.payTo)) throw mismatched("payTo");
    if (BigInt(a.value) !== r.atomic) throw mismatched("amount");
  } else if (m.kind === "permit2") {
    const a = m.inner.permit2Authorization;
    if (!same(a.witness.to, r.v2.payTo)) throw mismatched("payTo");
    if (!same(a.permitted.token, r.v2.asset)) throw mismatched("asset");
    if (!same(a.spender, X402_PERMIT2_PROXY)) throw mismatched("spender");
    if (BigInt(a.permitted.amount) !== r.atomic) throw mismatched("amount");
  } else {
    const p = m.inner.permit;
    if (!same(p.spender, String(r.v2.extra.spender))) throw mismatched("spender");
    if (BigInt(p.value) !== r.atomic) throw mismatched("amount");
  }
}

/**
 * Finds the requirement a payment answers. x402 v2 names its terms (`accepted`): asset, payTo, network, amount
 * and scheme must equal one we offered. x402 v1 names only scheme and network, so the asset is the one whose
 * transfer method fits the payload (when several fit, the one whose EIP-712 domain the signature is for).
 * Then the signed transfer itself must carry the amount and recipient. Anything else: 400 "mismatched payment".
 */
export async function matchPayment(decoded: Record<string, unknown>, offered: Requirement[], net: PaymentNetwork): Promise<MatchedPayment> {
  const version = decoded.x402Version;
  if (version !== 1 && version !== 2) throw mismatched("unsupported x402Version");
  if (version === 2) {
    const accepted = obj(decoded.accepted);
    if (!accepted) throw mismatched("no accepted requirements");
    const terms = offered.filter(
      (o) =>
        accepted.scheme === o.v2.scheme &&
        accepted.network === o.v2.network &&
        same(accepted.asset, o.v2.asset) &&
        same(accepted.payTo, o.v2.payTo) &&
        accepted.amount === o.v2.amount,
    );
    if (terms.length === 0) throw mismatched("accepted terms are not the ones offered for this amount");
    const inner = readInner(obj(decoded.payload));
    // A permit asset is offered twice (permit, Permit2) on the same terms: the payload says which was taken.
    const r = terms.find((o) => o.method === inner.kind);
    if (!r) throw mismatched(`${terms[0]!.asset.symbol} is paid by ${terms.map((o) => o.method).join(" or ")}`);
    checkTerms(inner, r);
    const payer = payerOf(inner);
    // The facilitator judges against our terms, not the client's copy of them.
    return {
      x402Version: 2,
      requirement: r,
      payload: { ...decoded, accepted: r.v2 },
      requirements: r.v2 as unknown as Record<string, unknown>,
      ...inner,
      payer,
      network: net.caip2,
    };
  }
  if (decoded.scheme !== "exact") throw mismatched("scheme");
  const network = net.v1Name ?? net.caip2;
  if (decoded.network !== network) throw mismatched("network");
  const inner = readInner(obj(decoded.payload));
  // x402 v1 has no Permit2 entries (the v1 body does not offer them).
  let candidates = offered.filter((o) => o.method === inner.kind && o.method !== "permit2");
  if (candidates.length === 0) throw mismatched(`no offered asset is paid by ${inner.kind}`);
  if (candidates.length > 1 && inner.kind === "eip3009") candidates = await bySignature(inner.inner, candidates, net.chainId);
  const r = candidates[0];
  if (!r) throw mismatched("the signature is for none of the offered assets");
  checkTerms(inner, r);
  const payer = payerOf(inner);
  return {
    x402Version: 1,
    requirement: r,
    payload: decoded,
    requirements: r.v1 as unknown as Record<string, unknown>,
    ...inner,
    payer,
    network,
  };
}

async function bySignature(p: Eip3009Payload, candidates: Requirement[], chainId: number): Promise<Requirement[]> {
  const a = p.authorization;
  if (!isAddress(a.from) || !isAddress(a.to)) return [];
  // viem's signature code is loaded with the first payment, not at start.
  const { verifyTypedData } = await import("viem/utils");
  for (const r of candidates) {
    const ok = await verifyTypedData({
      address: getAddress(a.from),
      domain: { name: r.asset.eip712Name, version: r.asset.eip712Version, chainId, verifyingContract: r.asset.address },
      types: TRANSFER_WITH_AUTHORIZATION_TYPES,
      primaryType: "TransferWithAuthorization",
      message: {
        from: a.from,
        to: a.to,
        value: BigInt(a.value),
        validAfter: BigInt(a.validAfter),
        validBefore: BigInt(a.validBefore),
        nonce: a.nonce,
      },
      signature: p.signature,
    }).catch(() => false);
    if (ok) return [r];
  }
  return [];
}

/**
 * How much a decoded payment pays, in µUSDC, as its own terms say (v2: `accepted.amount` of `accepted.asset`; v1:
 * the signed value, in the first offered asset its transfer method fits): what a paid call then checks and matches
 * it against. Undefined when it names no amount of an accepted asset; `matchPayment` then says why.
 */
export function claimedMicro(decoded: Record<string, unknown>, net: PaymentNetwork): number | undefined {
  let asset: Asset | undefined;
  let atomic: unknown;
  if (decoded.x402Version === 2) {
    const accepted = obj(decoded.accepted);
    asset = net.assets.find((a) => same(accepted?.asset, a.address));
    atomic = accepted?.amount;
  } else {
    const p = obj(decoded.payload);
    const kind = obj(p?.authorization) ? "eip3009" : obj(p?.permit) ? "permit" : undefined;
    atomic = (obj(p?.authorization) ?? obj(p?.permit))?.value;
    const fits = net.assets.filter((a) => a.transfer === kind);
    asset = fits.find((a) => a.symbol === "USDC") ?? fits[0];
  }
  if (!asset || typeof atomic !== "string" || !UINT.test(atomic)) return undefined;
  const micro = fromAtomic(BigInt(atomic), asset.decimals);
  return micro !== null && Number.isSafeInteger(micro) && micro > 0 ? micro : undefined;
}
