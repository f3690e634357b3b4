import { x402Facilitator } from "@x402/core/facilitator";
import type { PaymentPayload, PaymentRequirements } from "@x402/core/types";
import { toFacilitatorEvmSigner } from "@x402/evm";
import { ExactEvmScheme } from "@x402/evm/exact/facilitator";
import { ExactEvmSchemeV1 } from "@x402/evm/exact/v1/facilitator";
import { UptoEvmScheme } from "@x402/evm/upto/facilitator";
import { type Address, concat, defineChain, encodeFunctionData, type Hex, keccak256, parseAbi } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { log } from "../log.ts";
import { type Facilitator, FacilitatorUnavailable, type SettleResult, type VerifyResult, withTimeout } from "./facilitator.ts";
import type { PaymentNetwork } from "./networks.ts";
import type { PermitPayload } from "./payment.ts";
import { NETWORK_ERROR, PermitPath } from "./permitPath.ts";
import { type LocalClient, relayerClient } from "./relayer.ts";

const PERMIT2_ADDRESS = "0x000000000022D473030F116dDEE9F6B43aC78BA3";
const NONCE_BITMAP_ABI = parseAbi(["function nonceBitmap(address owner, uint256 wordPos) view returns (uint256)"]);

/**
 * The in-process facilitator (FACILITATOR=local): the relayer key on RPC_URL pays the gas.
 * - USDC (EIP-3009): x402's own facilitator library (`@x402/core` + `@x402/evm` exact, v1 and v2), which
 *   checks signature, recipient, amount, validity window and simulates `transferWithAuthorization`, then
 *   sends it and checks the Transfer event.
 * - Permit assets (USDT path, permitPath.ts): the payer signs an EIP-2612 permit for the relayer; settle sends `permit` and
 *   then `transferFrom(payer → PAY_TO)`; the settlement transaction is the transferFrom.
 * - Permit assets through x402's Permit2 flow (what `@x402/evm` clients sign): x402's library again, which
 *   checks the Permit2 witness signature, recipient, amount, deadline and simulates the proxy's `settle` (or
 *   `settleWithPermit`, when an EIP-2612 permit for Permit2 rides along), then sends it. Its transactions are
 *   signed here first, so a settlement whose answer is lost still names its transaction for recovery.
 * Settlements run one at a time (one relayer account, so its transaction nonces never race).
 */
export class LocalFacilitator implements Facilitator {
  readonly relayer: Address;
  private readonly client: LocalClient;
  private readonly permits: PermitPath;
  private readonly x402: x402Facilitator;
  private queue: Promise<unknown> = Promise.resolve();
  private chainChecked = 0;
  /** The last transaction the x402 library had signed (settlements run one at a time). */
  private sent?: Hex;

  constructor(
    private readonly net: PaymentNetwork,
    rpcUrl: string,
    relayerKey: Hex,
    private readonly payTo: Address,
    private readonly timeoutMs: number,
  ) {
    const account = privateKeyToAccount(relayerKey);
    this.relayer = account.address;
    const chain = defineChain({
      id: net.chainId,
      name: net.name,
      nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
      rpcUrls: { default: { http: [rpcUrl] } },
      contracts: { multicall3: { address: "0xcA11bde05977b3631167028862bE2a173976CA11" } },
    });
    const client = relayerClient(account, chain, rpcUrl, timeoutMs);
    this.client = client;
    this.permits = new PermitPath(client, this.relayer, payTo, net, timeoutMs);
    const signer = toFacilitatorEvmSigner(
      {
        address: account.address,
        readContract: (a) => client.readContract({ ...a, args: a.args ?? [] } as never),
        verifyTypedData: (a) => client.verifyTypedData(a as never),
        writeContract: (a) => this.send(a),
        sendTransaction: (a) => client.sendTransaction(a as never),
        waitForTransactionReceipt: (a) => client.waitForTransactionReceipt(a),
        getCode: (a) => client.getCode(a),
      },
      { confirmationTimeoutMs: timeoutMs },
    );
    this.x402 = new x402Facilitator()
      .register(net.caip2 as `${string}:${string}`, new ExactEvmScheme(signer))
      // `upto` (Permit2, the relayer named in the witness as the one facilitator): a keyless call settled for its charge.
      .register(net.caip2 as `${string}:${string}`, new UptoEvmScheme(signer));
    if (net.v1Name) this.x402.registerV1(net.v1Name as `${string}:${string}`, new ExactEvmSchemeV1(signer));
  }

  async verify(payload: Record<string, unknown>, requirements: Record<string, unknown>): Promise<VerifyResult> {
    await this.reachable();
    const inner = payload.payload as Record<string, unknown> | undefined;
    if (inner && "permit" in inner) return this.guard(() => this.permits.verify(inner as unknown as PermitPayload, requirements));
    return this.guard(() => this.x402.verify(payload as unknown as PaymentPayload, requirements as unknown as PaymentRequirements));
  }

  settle(payload: Record<string, unknown>, requirements: Record<string, unknown>): Promise<SettleResult> {
    const run = this.queue.then(async (): Promise<SettleResult> => {
      await this.reachable();
      const inner = payload.payload as Record<string, unknown> | undefined;
      if (inner && "permit" in inner)
        return this.settled(await this.guard(() => this.permits.settle(inner as unknown as PermitPayload, requirements)));
      this.sent = undefined;
      // Permit2 has no on-chain record keyed by the payment (unlike EIP-3009's AuthorizationUsed): its transaction
      // is the only handle recovery has, so a failure after signing one carries it.
      const handle = () => (inner && "permit2Authorization" in inner ? this.sent : undefined);
      try {
        const r = await this.guard(() =>
          this.x402.settle(payload as unknown as PaymentPayload, requirements as unknown as PaymentRequirements),
        );
        return this.settled(
          r.success || r.transaction ? (r as SettleResult) : { ...(r as SettleResult), transaction: handle() ?? "" },
          handle(),
        );
      } catch (e) {
        if (e instanceof FacilitatorUnavailable && !e.transaction && handle()) throw new FacilitatorUnavailable(e.message, handle());
        throw e;
      }
    });
    this.queue = run.catch(() => {});
    return run;
  }

  /**
   * Whether Permit2 has spent `nonce` of `owner` (its nonceBitmap): an `upto` authorization settled already, whatever
   * became of the answer to the transaction that spent it.
   */
  async permit2NonceUsed(owner: Address, nonce: bigint): Promise<boolean> {
    await this.reachable();
    const word = await this.guard(() =>
      this.client.readContract({
        address: PERMIT2_ADDRESS,
        abi: NONCE_BITMAP_ABI,
        functionName: "nonceBitmap",
        args: [owner, nonce >> 8n],
      }),
    );
    return ((word >> (nonce & 255n)) & 1n) === 1n;
  }

  /** The library reports a broken RPC connection as a failed settlement; that is the 503 case for us. */
  private settled(r: SettleResult, sent?: Hex): SettleResult {
    if (!r.success && r.errorReason && NETWORK_ERROR.test(r.errorReason))
      throw new FacilitatorUnavailable(`settle: ${r.errorReason}`, r.transaction || sent);
    return r;
  }

  /** writeContract for the x402 library: the transaction is signed and its hash kept before it is broadcast. */
  private async send(a: {
    address: Address;
    abi: readonly unknown[];
    functionName: string;
    args?: readonly unknown[];
    gas?: bigint;
    dataSuffix?: Hex;
  }): Promise<Hex> {
    const call = encodeFunctionData({ abi: a.abi, functionName: a.functionName, args: a.args ?? [] } as Parameters<
      typeof encodeFunctionData
    >[0]);
    const request = await this.client.prepareTransactionRequest({ to: a.address, data: concat([call, a.dataSuffix ?? "0x"]), gas: a.gas });
    const signed = await this.client.signTransaction(request);
    this.sent = keccak256(signed);
    return this.client.sendRawTransaction({ serializedTransaction: signed });
  }

  /** The RPC answers and serves the configured chain (checked at most every 10 s); else 503. */
  private async reachable(): Promise<void> {
    if (Date.now() - this.chainChecked < 10_000) return;
    let id: number;
    try {
      id = await withTimeout(Math.min(this.timeoutMs, 5_000), "RPC_URL", () => this.client.getChainId());
    } catch (e) {
      throw e instanceof FacilitatorUnavailable ? e : new FacilitatorUnavailable(`RPC_URL unreachable: ${(e as Error).message}`);
    }
    if (id !== this.net.chainId) {
      log.error("RPC_URL serves another chain than the payment network", { expected: this.net.chainId, got: id });
      throw new FacilitatorUnavailable(`RPC_URL serves chain ${id}, not ${this.net.chainId}`);
    }
    this.chainChecked = Date.now();
  }

  private async guard<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (e) {
      if (e instanceof FacilitatorUnavailable) throw e;
      const msg = e instanceof Error ? e.message : String(e);
      if (NETWORK_ERROR.test(msg)) throw new FacilitatorUnavailable(msg);
      throw e;
    }
  }
}
