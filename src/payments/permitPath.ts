import { type Address, encodeFunctionData, getAddress, type Hex, isAddressEqual, keccak256, parseSignature, verifyTypedData } from "viem";
import { FacilitatorUnavailable, type SettleResult, type VerifyResult } from "./facilitator.ts";
import type { LocalClient } from "./relayer.ts";
import type { PaymentNetwork } from "./networks.ts";
import type { PermitPayload } from "./payment.ts";
import { tokenAbi, transferred } from "./token.ts";
import { permitTypes } from "./typedData.ts";

/** Seconds a signed authorization must still be valid when it is checked (as x402's own facilitator). */
const VALIDITY_MARGIN_S = 6n;
/** An RPC failure (the 503 case), as viem words it. */
export const NETWORK_ERROR = /HTTP request failed|fetch failed|took too long|timed out|ECONNREFUSED|Unable to connect|socket/i;

/**
 * The local facilitator's permit path (the USDT path): the payer signs an EIP-2612 permit for the relayer; settle
 * sends `permit`, then `transferFrom(payer → PAY_TO)`, which is the settlement transaction. Checked first: the
 * spender, value, deadline, signature, the token's nonce and the payer's balance.
 */
export class PermitPath {
  constructor(
    private readonly client: LocalClient,
    private readonly relayer: Address,
    private readonly payTo: Address,
    private readonly net: PaymentNetwork,
    private readonly timeoutMs: number,
  ) {}

  async verify(p: PermitPayload, requirements: Record<string, unknown>): Promise<VerifyResult & { owner?: Address }> {
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

  async settle(p: PermitPayload, requirements: Record<string, unknown>): Promise<SettleResult> {
    const network = String(requirements.network);
    const payer = String(p.permit.owner);
    const checked = await this.verify(p, requirements);
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
