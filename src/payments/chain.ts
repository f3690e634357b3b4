/**
 * The chain reads payment recovery makes: viem's public client over RPC_URL and the token's ABI. Imported by
 * recovery.ts only when RPC_URL is set, so a gateway without it never loads viem's client.
 */
import { createPublicClient, getAbiItem, http } from "viem";
import { tokenAbi, transferred } from "./token.ts";

export { tokenAbi, transferred };

/** The token's AuthorizationUsed event (EIP-3009), for the log search that finds a used authorization's transaction. */
export const AUTHORIZATION_USED = getAbiItem({ abi: tokenAbi, name: "AuthorizationUsed" });

/** A public client on RPC_URL: one retry, each call bounded by the facilitator's timeout. */
export function chainClient(rpcUrl: string, timeoutMs: number) {
  return createPublicClient({ transport: http(rpcUrl, { timeout: timeoutMs, retryCount: 1 }) });
}
