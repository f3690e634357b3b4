import { x402Facilitator } from "@x402/core/facilitator";
import type { PaymentPayload, PaymentRequirements } from "@x402/core/types";
import { toFacilitatorEvmSigner } from "@x402/evm";
import { ExactEvmScheme } from "@x402/evm/exact/facilitator";
import { ExactEvmSchemeV1 } from "@x402/evm/exact/v1/facilitator";
import {
  type Address,
  concat,
  createWalletClient,
  defineChain,
  encodeFunctionData,
  getAddress,
  type Hex,
  http,
  isAddressEqual,
  keccak256,
  parseSignature,
  publicActions,
  verifyTypedData,
} from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { log } from "../log.ts";
import { type Facilitator, FacilitatorUnavailable, type SettleResult, type VerifyResult, withTimeout } from "./facilitator.ts";
import type { PaymentNetwork } from "./networks.ts";
import type { PermitPayload } from "./payment.ts";
import { tokenAbi, transferred } from "./token.ts";
import { permitTypes } from "./typedData.ts";

/** Seconds a signed authorization must still be valid when it is checked (as x402's own facilitator). */
const VALIDITY_MARGIN_S = 6n;
const NETWORK_ERROR = /HTTP request failed|fetch failed|took too long|timed out|ECONNREFUSED|Unable to connect|socket/i;

/**
 * The in-process facilitator (FACILITATOR=local): the relayer key on RPC_URL pays the gas.
 * - USDC (EIP-3009): x402's own facilitator library (`@x402/core` + `@x402/evm` exact, v1 and v2), which
 *   checks signature, recipient, amount, validity window and simulates `transferWithAuthorization`, then
 *   sends it and checks the Transfer event.
 * - Permit assets (USDT path): the payer signs an EIP-2612 permit for the relayer; settle sends `permit` and
 *   then `transferFrom(payer → PAY_TO)`; the settlement transaction is the transferFrom.
 * - Permit assets through x402's Permit2 flow (what `@x402/evm` clients sign): x402's library again, which
 *   checks the Permit2 witness signature, recipient, amount, deadline and simulates the proxy's `settle` (or
 *   `settleWithPermit`, when an EIP-2612 permit for Permit2 rides along), then sends it. Its transactions are
 *   signed here first, so a settlement whose answer is lost still names its transaction for recovery.
 * Settlements run one at a time (one relayer account, so its transaction nonces never race).
 */
export class LocalFacilitator implements Facilitator {
  readonly relayer: Address;
  private readonly client;
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
    const client = createWalletClient({ account, chain, transport: http(rpcUrl, { timeout: timeoutMs, retryCount: 1 }) }).extend(
      publicActions,
    );
    this.client = client;
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
    this.x402 = new x402Facilitator().register(net.caip2 as `${string}:${string}`, new ExactEvmScheme(signer));
    if (net.v1Name) this.x402.registerV1(net.v1Name as `${string}:${string}`, new ExactEvmSchemeV1(signer));
  }

  async verify(payload: Record<string, unknown>, requirements: Record<string, unknown>): Promise<VerifyResult> {
    await this.reachable();
    const inner = payload.payload as Record<string, unknown> | undefined;
    if (inner && "permit" in inner) return this.guard(() => this.verifyPermit(inner as unknown as PermitPayload, requirements));
    return this.guard(() => this.x402.verify(payload as unknown as PaymentPayload, requirements as unknown as PaymentRequirements));
  }

  settle(payload: Record<string, unknown>, requirements: Record<string, unknown>): Promise<SettleResult> {
    const run = this.queue.then(async (): Promise<SettleResult> => {
      await this.reachable();
      const inner = payload.payload as Record<string, unknown> | undefined;
      if (inner && "permit" in inner)
        return this.settled(await this.guard(() => this.settlePermit(inner as unknown as PermitPayload, requirements)));
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

  // ---- permit path (EIP-2612 + transferFrom) ----

  private async verifyPermit(p: PermitPayload, requirements: Record<string, unknown>): Promise<VerifyResult & { owner?: Address }> {
    const permit = p.permit;
    const payer = String(permit.owner);
    const invalid = (invalidReason: string) => ({ isValid: false, invalidReason, payer });
    const extra = (requirements.extra ?? {}) as Record<string, unknown>;
    const asset = getAddress(String(requirements.asset));
    const atomic = BigInt(String(requirements.maxAmountRequired ?? requirements.amount));
    if (!isAddressEqual(getAddress(permit.spender), this.relayer)) return invalid("invalid_permit_spender");
    if (BigInt(permit.value) !== atomic) return invalid("invalid_permit_value");
    const now = BigInt(Math.floor(Date.now() / 1000));
    if (BigInt(permit.deadline) < now + VALIDITY_MARGIN_S) return invalid("permit_expired");
    if (BigInt(permit.deadline) > now + 3600n) return invalid("permit_deadline_too_far");
    const owner = getAddress(permit.owner);
    const signed = await verifyTypedData({
      address: owner,
      domain: { name: String(extra.name), version: String(extra.version), chainId: this.net.chainId, verifyingContract: asset },
      types: permitTypes,
      primaryType: "Permit",
      message: { owner, spender: this.relayer, value: atomic, nonce: BigInt(permit.nonce), deadline: BigInt(permit.deadline) },
      signature: p.signature,
    }).catch(() => false);
    if (!signed) return invalid("invalid_signature");
    const [nonce, balance] = await Promise.all([
      this.client.readContract({ address: asset, abi: tokenAbi, functionName: "nonces", args: [owner] }),
      this.client.readContract({ address: asset, abi: tokenAbi, functionName: "balanceOf", args: [owner] }),
    ]);
    if (nonce !== BigInt(permit.nonce)) return invalid("permit_nonce_used");
    if (balance < atomic) return invalid("insufficient_funds");
    return { isValid: true, payer, owner };
  }

  private async settlePermit(p: PermitPayload, requirements: Record<string, unknown>): Promise<SettleResult> {
    const network = String(requirements.network);
    const payer = String(p.permit.owner);
    const checked = await this.verifyPermit(p, requirements);
    if (!checked.isValid || !checked.owner) return { success: false, errorReason: checked.invalidReason, transaction: "", network, payer };
    const owner = checked.owner;
    const asset = getAddress(String(requirements.asset));
    const value = BigInt(p.permit.value);
    const sig = parseSignature(p.signature);
    const fail = (errorReason: string, transaction = "") => ({ success: false, errorReason, transaction, network, payer });
    let tx: Hex | undefined;
    try {
      const permitTx = await this.client.writeContract({
        address: asset,
        abi: tokenAbi,
        functionName: "permit",
        args: [owner, this.relayer, value, BigInt(p.permit.deadline), Number(sig.v ?? 27n + BigInt(sig.yParity)), sig.r, sig.s],
      });
      const permitReceipt = await this.client.waitForTransactionReceipt({ hash: permitTx, timeout: this.timeoutMs });
      if (permitReceipt.status !== "success") return fail("permit_failed", permitTx);
      // Signed here, so its hash is known before it is broadcast: if sending fails or times out, the transfer may
      // still land, and recovery needs the hash to find out.
      const request = await this.client.prepareTransactionRequest({
        to: asset,
        data: encodeFunctionData({ abi: tokenAbi, functionName: "transferFrom", args: [owner, this.payTo, value] }),
      });
      const signed = await this.client.signTransaction(request);
      tx = keccak256(signed);
      await this.client.sendRawTransaction({ serializedTransaction: signed });
      const receipt = await this.client.waitForTransactionReceipt({ hash: tx, timeout: this.timeoutMs });
      if (receipt.status !== "success") return fail("transaction_failed", tx);
      if (!transferred(receipt.logs, asset, owner, this.payTo, value)) return fail("transfer_event_mismatch", tx);
      return { success: true, transaction: tx, network, payer };
    } catch (e) {
      const msg = e instanceof Error ? e.message : String(e);
      // Once transferFrom was sent its outcome is unknown here: the transaction goes along for recovery.
      if (NETWORK_ERROR.test(msg)) throw new FacilitatorUnavailable(msg, tx);
      if (tx) return fail("transaction_failed", tx);
      return fail(/expired/i.test(msg) ? "permit_expired" : /signature/i.test(msg) ? "invalid_signature" : "transaction_failed");
    }
  }
}
