/**
 * A standalone x402 facilitator service for FACILITATOR_URL tests: x402's own facilitator library
 * (`@x402/core` x402Facilitator + `@x402/evm` exact, v1 and v2) behind the standard POST /verify and /settle,
 * settling EIP-3009 on the dev chain with its own relayer. Not the gateway's code: the HTTP client is tested
 * against the reference implementation.
 */
import { x402Facilitator } from "@x402/core/facilitator";
import { toFacilitatorEvmSigner } from "@x402/evm";
import { ExactEvmScheme } from "@x402/evm/exact/facilitator";
import { ExactEvmSchemeV1 } from "@x402/evm/exact/v1/facilitator";
import { createWalletClient, http, parseEther, publicActions } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import type { DevChain } from "./chain.ts";

export interface FacilitatorServer {
  url: string;
  calls: string[];
  /** The settlements this facilitator made, in order, each resolved once it is on chain (before any delay). */
  settlements: Promise<{ success: boolean; transaction: string }>[];
  stop(): void;
}

/**
 * `settleDelayMs`: answer /settle only that long after the settlement is on chain (a facilitator slower than the
 * gateway's timeout, whose payment nonetheless moved). `settleHangs`: verify, but never settle nor answer /settle.
 * `settleFails`: verify, then answer /settle with a failure (transaction_failed) without sending anything.
 * `onSettle`: called when a settlement is on chain, before /settle answers (a test kills the gateway there).
 */
export async function startFacilitator(
  chain: DevChain,
  opts: { settleDelayMs?: number; settleHangs?: boolean; settleFails?: boolean; onSettle?: () => Promise<void> } = {},
): Promise<FacilitatorServer> {
  const account = privateKeyToAccount(generatePrivateKey());
  await chain.rpc("anvil_setBalance", [account.address, `0x${parseEther("100").toString(16)}`]);
  const client = createWalletClient({ account, chain: chain.chain, transport: http(chain.rpcUrl) }).extend(publicActions);
  const signer = toFacilitatorEvmSigner({
    address: account.address,
    readContract: (a) => client.readContract({ ...a, args: a.args ?? [] } as never),
    verifyTypedData: (a) => client.verifyTypedData(a as never),
    writeContract: (a) => client.writeContract({ ...a, args: a.args ?? [] } as never),
    sendTransaction: (a) => client.sendTransaction(a as never),
    waitForTransactionReceipt: (a) => client.waitForTransactionReceipt(a),
    getCode: (a) => client.getCode(a),
  });
  const facilitator = new x402Facilitator()
    .register(`eip155:${chain.chainId}`, new ExactEvmScheme(signer))
    .registerV1("base-sepolia" as `${string}:${string}`, new ExactEvmSchemeV1(signer));
  const calls: string[] = [];
  const settlements: FacilitatorServer["settlements"] = [];
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      const path = new URL(req.url).pathname;
      calls.push(path);
      if (req.method !== "POST" || (path !== "/verify" && path !== "/settle")) return new Response("not found", { status: 404 });
      const { paymentPayload, paymentRequirements } = (await req.json()) as { paymentPayload: never; paymentRequirements: never };
      if (path === "/verify") return Response.json(await facilitator.verify(paymentPayload, paymentRequirements));
      if (opts.settleHangs) return new Promise<Response>(() => {});
      if (opts.settleFails) {
        const { accepted } = paymentPayload as { accepted?: { network?: string } };
        return Response.json({ success: false, errorReason: "transaction_failed", transaction: "", network: accepted?.network ?? "" });
      }
      const settled = facilitator.settle(paymentPayload, paymentRequirements);
      settlements.push(settled);
      const result = await settled;
      if (opts.onSettle) await opts.onSettle();
      if (opts.settleDelayMs) {
        // The chain moves on while the answer is late, so the settlement is not in the latest block any more.
        await chain.rpc("anvil_mine", ["0x5"]);
        await Bun.sleep(opts.settleDelayMs); // the slow answer under test, not a wait for work
      }
      return Response.json(result);
    },
  });
  return { url: `http://127.0.0.1:${server.port}`, calls, settlements, stop: () => server.stop(true) };
}

/** A facilitator that accepts connections and never answers (the timeout case). */
export function startHangingFacilitator(): { url: string; stop(): void } {
  const server = Bun.serve({ port: 0, hostname: "127.0.0.1", idleTimeout: 0, fetch: () => new Promise<Response>(() => {}) });
  return { url: `http://127.0.0.1:${server.port}`, stop: () => server.stop(true) };
}
