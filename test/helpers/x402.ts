/** The x402 client libraries as a payer uses them, pointed at the in-process gateway. */
import { x402Client, wrapFetchWithPayment as wrapV2 } from "@x402/fetch";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { toClientEvmSigner } from "@x402/evm";
import { createPublicClient, createWalletClient, http, publicActions } from "viem";
import type { PrivateKeyAccount } from "viem/accounts";
import { wrapFetchWithPayment as wrapV1 } from "x402-fetch";
import { TRANSFER_WITH_AUTHORIZATION_TYPES } from "../../src/payments/typedData.ts";
import { PermitAwareExactEvmScheme } from "../../src/payments/permitClient.ts";
import type { DevChain } from "./chain.ts";

/** x402 v1: `x402-fetch` with a viem wallet client on the dev chain (reads the 402 body, sends X-PAYMENT). */
export function v1Fetch(fetchFn: typeof fetch, chain: DevChain, payer: PrivateKeyAccount, maxAtomic = 10n ** 30n): typeof fetch {
  const wallet = createWalletClient({ account: payer, chain: chain.chain, transport: http(chain.rpcUrl) }).extend(publicActions);
  return wrapV1(fetchFn, wallet as never, maxAtomic) as typeof fetch;
}

/**
 * x402 v2: `@x402/fetch` (reads PAYMENT-REQUIRED, sends PAYMENT-SIGNATURE). `asset` picks USDC (x402's own
 * ExactEvmScheme, EIP-3009) or USDT (the gateway's PermitAwareExactEvmScheme, EIP-2612 permit: its policy also
 * passes over the Permit2 entry, which is ahead of the permit one).
 */
export function v2Fetch(fetchFn: typeof fetch, chain: DevChain, payer: PrivateKeyAccount, asset: "USDC" | "USDT" = "USDC"): typeof fetch {
  const pub = createPublicClient({ chain: chain.chain, transport: http(chain.rpcUrl) });
  const client = new x402Client();
  if (asset === "USDC") {
    registerExactEvmScheme(client, { signer: payer });
  } else {
    client.register(`eip155:${chain.chainId}`, new PermitAwareExactEvmScheme(toClientEvmSigner(payer, pub)));
  }
  // Spend controls admit only x402's built-in tokens unless told: the payer opts in to the dev chain's.
  client.setSpendControls({
    allowedAssets: [chain.usdc, chain.usdt].map((t) => ({ network: `eip155:${chain.chainId}` as const, asset: t.address })),
  });
  client.registerPolicy((_v, reqs) =>
    reqs.filter((r) => {
      const extra = (r.extra ?? {}) as Record<string, unknown>;
      return extra.symbol === asset && extra.assetTransferMethod !== "permit2";
    }),
  );
  return wrapV2(fetchFn, client) as typeof fetch;
}

/**
 * x402 v2 exactly as `@x402/evm` documents it, nothing of the gateway's: `registerExactEvmScheme` with the
 * payer's account and the chain's RPC (`schemeOptions.rpcUrl`: reads the token's permit nonce and the Permit2
 * allowance), and spend controls that admit the dev chain's USDT only (its USDC is no token x402 knows, so it is
 * left out by not listing it). It pays USDT through Permit2, signing an EIP-2612 permit for Permit2 as well when
 * its allowance is short.
 */
export function v2StockUsdtFetch(fetchFn: typeof fetch, chain: DevChain, payer: PrivateKeyAccount): typeof fetch {
  const client = new x402Client();
  registerExactEvmScheme(client, { signer: payer, schemeOptions: { rpcUrl: chain.rpcUrl } });
  client.setSpendControls({ allowedAssets: [{ network: `eip155:${chain.chainId}`, asset: chain.usdt.address }] });
  return wrapV2(fetchFn, client) as typeof fetch;
}

/**
 * Runs a real client up to the paid request and returns the payment header it made, without sending it: tests
 * replay or tamper with it. `header` is X-PAYMENT (v1) or PAYMENT-SIGNATURE (v2).
 */
export async function capturePayment(
  gwFetch: typeof fetch,
  make: (f: typeof fetch) => typeof fetch,
  amount: number,
): Promise<{ name: "x-payment" | "payment-signature"; value: string }> {
  let captured: { name: "x-payment" | "payment-signature"; value: string } | undefined;
  const spy = (async (input: string | URL | Request, init?: RequestInit) => {
    const req = new Request(input, init);
    const v1 = req.headers.get("x-payment");
    const v2 = req.headers.get("payment-signature");
    if (v1 || v2) {
      captured = v1 ? { name: "x-payment", value: v1 } : { name: "payment-signature", value: v2! };
      return new Response("{}", { status: 200, headers: { "content-type": "application/json" } });
    }
    return gwFetch(req);
  }) as typeof fetch;
  await make(spy)(`https://gateway.test/v1/topup`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ amount }),
  });
  if (!captured) throw new Error("the client sent no payment");
  return captured;
}

export const encode = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64");
export const decode = (h: string) => JSON.parse(Buffer.from(h, "base64").toString("utf8"));

/** An x402 v1 `exact` payment signed by hand (EIP-3009 over the token's domain), for terms a client would not make. */
export async function signV1Payment(
  chain: DevChain,
  payer: PrivateKeyAccount,
  o: { to: `0x${string}`; value: bigint; validAfter?: bigint; validBefore?: bigint; token?: `0x${string}` },
): Promise<string> {
  const now = BigInt(Math.floor(Date.now() / 1000));
  const authorization = {
    from: payer.address,
    to: o.to,
    value: o.value,
    validAfter: o.validAfter ?? now - 600n,
    validBefore: o.validBefore ?? now + 300n,
    nonce: `0x${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("hex")}` as `0x${string}`,
  };
  const signature = await payer.signTypedData({
    domain: {
      name: chain.usdc.eip712Name,
      version: chain.usdc.eip712Version,
      chainId: chain.chainId,
      verifyingContract: o.token ?? chain.usdc.address,
    },
    types: TRANSFER_WITH_AUTHORIZATION_TYPES,
    primaryType: "TransferWithAuthorization",
    message: authorization,
  });
  const str = Object.fromEntries(Object.entries(authorization).map(([k, v]) => [k, String(v)]));
  return encode({ x402Version: 1, scheme: "exact", network: "base-sepolia", payload: { signature, authorization: str } });
}
