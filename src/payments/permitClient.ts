import type { PaymentPayloadContext, PaymentPayloadResult, PaymentRequirements, SchemeNetworkClient } from "@x402/core/types";
import { ExactEvmScheme, type ClientEvmSigner } from "@x402/evm";
import { getAddress, type Address, type Hex } from "viem";
import { permitTypes } from "./typedData.ts";
import { PERMIT_TRANSFER_METHOD } from "./requirements.ts";

const V1_CHAIN_IDS: Record<string, number> = { base: 8453, "base-sepolia": 84532 };
const noncesAbi = [
  { type: "function", name: "nonces", stateMutability: "view", inputs: [{ name: "a", type: "address" }], outputs: [{ type: "uint256" }] },
] as const;

/**
 * A payer-side x402 scheme client for this gateway's permit assets (USDT path), for `@x402/fetch` /
 * `@x402/core`'s x402Client: requirements with `extra.assetTransferMethod = "eip2612"` are paid by an EIP-2612
 * permit for `extra.spender` (the gateway's relayer); everything else goes to x402's own ExactEvmScheme
 * (EIP-3009). The signer needs `readContract` (the token's permit nonce), e.g. `toClientEvmSigner(account,
 * publicClient)`.
 *
 *   const client = new x402Client().register("eip155:*", new PermitAwareExactEvmScheme(signer));
 *
 * The v2 terms list USDT through Permit2 ahead of its permit entry (for stock x402 clients); this scheme pays that
 * one too (x402's own Permit2 flow), so a client that wants the permit path filters it out with a policy:
 *
 *   client.registerPolicy((_v, reqs) => reqs.filter((r) => r.extra?.assetTransferMethod !== "permit2"));
 */
export class PermitAwareExactEvmScheme implements SchemeNetworkClient {
  readonly scheme = "exact";
  private readonly exact: ExactEvmScheme;

  constructor(private readonly signer: ClientEvmSigner) {
    this.exact = new ExactEvmScheme(signer);
  }

  async createPaymentPayload(
    x402Version: number,
    requirements: PaymentRequirements,
    context?: PaymentPayloadContext,
  ): Promise<PaymentPayloadResult> {
    const extra = requirements.extra ?? {};
    if (extra.assetTransferMethod !== PERMIT_TRANSFER_METHOD) return this.exact.createPaymentPayload(x402Version, requirements, context);
    if (!this.signer.readContract) throw new Error("permit payments need a signer with readContract (the token's nonce)");
    const r = requirements as PaymentRequirements & { maxAmountRequired?: string };
    const network = String(r.network);
    const chainId = network.startsWith("eip155:") ? Number(network.slice(7)) : V1_CHAIN_IDS[network];
    if (!chainId) throw new Error(`unknown network ${network}`);
    const asset = getAddress(r.asset) as Address;
    const spender = getAddress(String(extra.spender)) as Address;
    const value = BigInt(r.amount ?? r.maxAmountRequired ?? "0");
    const nonce = (await this.signer.readContract({
      address: asset,
      abi: noncesAbi,
      functionName: "nonces",
      args: [this.signer.address],
    })) as bigint;
    const deadline = BigInt(Math.floor(Date.now() / 1000) + r.maxTimeoutSeconds);
    const signature: Hex = await this.signer.signTypedData({
      domain: { name: String(extra.name), version: String(extra.version), chainId, verifyingContract: asset },
      types: permitTypes as unknown as Record<string, unknown>,
      primaryType: "Permit",
      message: { owner: this.signer.address, spender, value, nonce, deadline },
    });
    const payload = {
      signature,
      permit: { owner: this.signer.address, spender, value: value.toString(), nonce: nonce.toString(), deadline: deadline.toString() },
    };
    return (x402Version === 1 ? { x402Version, scheme: "exact", network, payload } : { x402Version, payload }) as PaymentPayloadResult;
  }
}
