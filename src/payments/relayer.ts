import { type Chain, createWalletClient, http, publicActions } from "viem";
import type { PrivateKeyAccount } from "viem/accounts";

/** The relayer's viem client (a wallet client with the public actions): it signs and sends the local facilitator's transactions. */
export function relayerClient(account: PrivateKeyAccount, chain: Chain, rpcUrl: string, timeoutMs: number) {
  return createWalletClient({ account, chain, transport: http(rpcUrl, { timeout: timeoutMs, retryCount: 1 }) }).extend(publicActions);
}

/** What relayerClient makes. */
export type LocalClient = ReturnType<typeof relayerClient>;
