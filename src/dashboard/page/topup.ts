/**
 * The x402 exchange of POST /v1/topup, paid by the connected wallet: ask for the terms (402), sign the transfer
 * for the chosen asset (EIP-3009 `transferWithAuthorization` for USDC; an EIP-2612 permit for the gateway's
 * relayer for USDT, as src/payments/permitClient.ts does for scripts), send it as X-Payment (x402 v1).
 */
import { type Address, getAddress, type Hex, toHex } from "viem";
import { api, ApiFailure } from "./api.ts";
import type { ConnectedWallet } from "./wallet.ts";
import { permitTypes, TRANSFER_WITH_AUTHORIZATION_TYPES as transferTypes } from "../../payments/typedData.ts";

/** One entry of the 402 body's `accepts` (x402 v1). */
export interface Accept {
  scheme: string;
  network: string;
  maxAmountRequired: string;
  payTo: Address;
  asset: Address;
  maxTimeoutSeconds: number;
  extra: { name: string; version: string; symbol?: string; decimals?: number; assetTransferMethod?: string; spender?: Address };
}

export interface TopupResult {
  balance_usdc: number;
  credited_usdc: number;
  /** Settlement transaction, from the X-PAYMENT-RESPONSE receipt. */
  transaction?: string;
}

export type TopupStep = "terms" | "network" | "sign" | "settle";

const body = (amount: number) => JSON.stringify({ amount });

/** Step 1: the terms for `amount` USD, one entry per accepted asset. */
export async function paymentTerms(amount: number): Promise<Accept[]> {
  try {
    await api("/v1/topup", { method: "POST", body: body(amount) });
  } catch (e) {
    if (e instanceof ApiFailure && e.status === 402 && Array.isArray(e.body.accepts)) return e.body.accepts as Accept[];
    throw e;
  }
  throw new Error("the gateway took a top-up without payment");
}

/** Signs the transfer the terms ask for and returns the X-Payment header value. */
async function signPayment(wallet: ConnectedWallet, a: Accept, chainId: number): Promise<string> {
  const now = BigInt(Math.floor(Date.now() / 1000));
  const value = BigInt(a.maxAmountRequired);
  const asset = getAddress(a.asset);
  const domain = { name: a.extra.name, version: a.extra.version, chainId, verifyingContract: asset };
  let payload: Record<string, unknown>;
  if (a.extra.assetTransferMethod === "eip2612") {
    const spender = getAddress(a.extra.spender!);
    const nonce = await wallet.permitNonce(asset);
    const deadline = now + BigInt(a.maxTimeoutSeconds);
    const signature = await wallet.signTypedData({
      account: wallet.address,
      domain,
      types: permitTypes,
      primaryType: "Permit",
      message: { owner: wallet.address, spender, value, nonce, deadline },
    });
    payload = { signature, permit: { owner: wallet.address, spender, value: `${value}`, nonce: `${nonce}`, deadline: `${deadline}` } };
  } else {
    const authorization = {
      from: wallet.address,
      to: getAddress(a.payTo),
      value,
      // Ten minutes back, as x402's clients do, so a computer clock a little ahead of the chain does not matter.
      validAfter: now - 600n,
      validBefore: now + BigInt(a.maxTimeoutSeconds),
      nonce: toHex(crypto.getRandomValues(new Uint8Array(32))) as Hex,
    };
    const signature = await wallet.signTypedData({
      account: wallet.address,
      domain,
      types: transferTypes,
      primaryType: "TransferWithAuthorization",
      message: authorization,
    });
    payload = { signature, authorization: Object.fromEntries(Object.entries(authorization).map(([k, v]) => [k, `${v}`])) };
  }
  return btoa(JSON.stringify({ x402Version: 1, scheme: a.scheme, network: a.network, payload }));
}

/**
 * The whole exchange for `amount` USD in `symbol`. `progress` hears each step as it starts. The wallet is asked
 * to use the payment network first (the signature binds the chain id).
 */
export async function topUp(
  wallet: ConnectedWallet,
  amount: number,
  symbol: string,
  chainId: number,
  progress: (step: TopupStep) => void,
): Promise<TopupResult> {
  progress("terms");
  const accepts = await paymentTerms(amount);
  const terms = accepts.find((a) => a.extra?.symbol === symbol);
  if (!terms) throw new Error(`the gateway does not take ${symbol} for this amount`);
  progress("network");
  await wallet.useChain(chainId);
  progress("sign");
  const header = await signPayment(wallet, terms, chainId);
  progress("settle");
  const res = await api<TopupResult>("/v1/topup", { method: "POST", body: body(amount), headers: { "x-payment": header } });
  const receipt = res.headers.get("x-payment-response");
  let transaction: string | undefined;
  try {
    transaction = receipt ? (JSON.parse(atob(receipt)) as { transaction?: string }).transaction : undefined;
  } catch {
    // a receipt we cannot read: the balance still tells
  }
  return { ...res.body, transaction };
}
