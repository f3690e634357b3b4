/**
 * A verified payment's money moving: settled through the facilitator (an error opens a recovery check first), the
 * wallet credited once the chain has it, and the x402 receipt either way. Apart from topup.service.ts, which
 * decides whether a payment gets this far.
 */
import { BareError } from "../../errors.ts";
import { log } from "../../log.ts";
import { type Facilitator, FacilitatorUnavailable, type SettleResult } from "../../payments/facilitator.ts";
import type { MatchedPayment } from "../../payments/payment.ts";
import type { PaymentRecovery } from "../../payments/recovery.ts";
import { encodeHeader } from "../../payments/requirements.ts";
import { topupEventId } from "../../payments/topupId.ts";
import type { Credits } from "../../store/credits.ts";

/** A payment verified, settled and credited: the answer's receipt headers and what the wallet got. */
export interface Paid {
  balance: number;
  credited: number;
  /** PAYMENT-RESPONSE and X-PAYMENT-RESPONSE (success). */
  headers: Record<string, string>;
  tx: string;
  payer: string;
}

/** A payment that moved nothing: the facilitator refused it (verify) or its settlement failed. */
export interface Refused {
  reason: string;
  /** PAYMENT-RESPONSE with success:false (x402 v2). */
  headers: Record<string, string>;
}

/** The answer to a payment that moved nothing, with its receipt saying why. */
export function refused(payment: MatchedPayment, reason: string): Refused {
  const receipt = encodeHeader({ success: false, errorReason: reason, transaction: "", network: payment.network, payer: payment.payer });
  return { reason, headers: { "payment-response": receipt } };
}

/** Money moved on chain: from here on nothing may lose the credit (Credits.addSettled retries and defers). */
export async function creditSettled(
  credits: Credits,
  recovery: PaymentRecovery,
  caip2: string,
  payment: MatchedPayment,
  microUsdc: number,
  tx: string,
  wallet: string,
): Promise<Paid> {
  const r = await credits.addSettled({
    eventId: topupEventId(caip2, tx),
    wallet,
    kind: "topup",
    amountUsdc: microUsdc,
    txHash: tx,
    network: caip2,
    reason: `${payment.requirement.asset.symbol} x402 v${payment.x402Version}`,
    payer: payment.payer,
  });
  if (r.duplicate) log.warn("settlement already credited; not crediting again", { tx_hash: tx });
  else log.info("top-up credited", { wallet, payer: payment.payer, amount_usdc: microUsdc, tx_hash: tx, deferred: r.deferred });
  await recovery.credited(payment, tx);
  const receipt = encodeHeader({ success: true, transaction: tx, network: payment.network, payer: payment.payer });
  return {
    balance: r.balance,
    credited: r.duplicate ? 0 : microUsdc,
    headers: { "x-payment-response": receipt, "payment-response": receipt, "cache-control": "no-store" },
    tx,
    payer: payment.payer,
  };
}

/**
 * Settles through the facilitator. Once settle was asked, money may move whatever the answer: an error opens a
 * recovery check before the client hears 503 (or 500), so a late settlement is still credited.
 */
export async function settlePayment(
  facilitator: Facilitator,
  recovery: PaymentRecovery,
  payment: MatchedPayment,
  microUsdc: number,
  fromBlock: bigint | undefined,
  wallet: string | undefined,
): Promise<SettleResult> {
  try {
    return await facilitator.settle(payment.payload, payment.requirements);
  } catch (e) {
    const unavailable = e instanceof FacilitatorUnavailable;
    await recovery.open(
      payment,
      microUsdc,
      `settle: ${e instanceof Error ? e.message : String(e)}`,
      fromBlock,
      unavailable ? e.transaction : undefined,
      { wallet },
    );
    throw unavailable ? facilitatorDown(e) : e;
  }
}

/** A facilitator call whose outage the client hears as 503 (spec rule 5), never as a 500. */
export async function unavailableAs503<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    throw e instanceof FacilitatorUnavailable ? facilitatorDown(e) : e;
  }
}

/** The client's answer when the facilitator cannot be reached (503, spec rule 5); the operator's error line. */
function facilitatorDown(e: FacilitatorUnavailable): BareError {
  log.error("payment facilitator unavailable", { error: e });
  return new BareError(503, "payment facilitator unavailable");
}
