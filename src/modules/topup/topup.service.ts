import type { Address } from "viem";
import { ApiError, BareError } from "../../errors.ts";
import { log } from "../../log.ts";
import { parseUsd } from "../../billing/money.ts";
import type { PaymentsConfig } from "../../payments/config.ts";
import type { Facilitator } from "../../payments/facilitator.ts";
import { HttpFacilitator } from "../../payments/http.ts";
import type { LocalFacilitator } from "../../payments/local.ts";
import { matchPayment } from "../../payments/payment.ts";
import { decodePaymentHeader } from "../../payments/paymentHeader.ts";
import { PaymentRecovery } from "../../payments/recovery.ts";
import { PaymentIds } from "../../payments/paymentIds.ts";
import { buildOffer, callOffer, type CallOffer, encodeHeader, type Offer } from "../../payments/requirements.ts";
import type { Credits } from "../../store/credits.ts";
import type { Sql } from "../../store/db.ts";
import { creditSettled, type Paid, type Refused, refused, settlePayment, unavailableAs503 } from "./settlement.ts";

const TX_HASH = /^0x[0-9a-fA-F]{64}$/;

/** The smallest top-up, USD (the dashboard says so before asking). */
export const MIN_TOPUP_USD = 1;
const MIN_TOPUP_MICRO = MIN_TOPUP_USD * 1_000_000;
// Far above any real top-up, and far below 2^53 µUSDC.
const MAX_TOPUP_MICRO = 1_000_000_000 * 1_000_000;

/** TopupRequest.amount (USD) → µUSDC: at least 1 USD, at most 6 decimals; 400 VALIDATION_ERROR otherwise. */
export function topupAmount(amount: number): number {
  const micro = Number.isFinite(amount) ? parseUsd(String(amount)) : null;
  if (micro === null) throw new ApiError({ code: "VALIDATION_ERROR", message: "amount: must be a USD amount with at most 6 decimals" });
  if (micro < MIN_TOPUP_MICRO)
    throw new ApiError({ code: "VALIDATION_ERROR", message: `amount: the minimum top-up is ${MIN_TOPUP_USD} USD` });
  if (micro > MAX_TOPUP_MICRO) throw new ApiError({ code: "VALIDATION_ERROR", message: "amount: the maximum top-up is 1,000,000,000 USD" });
  return micro;
}

/** What a top-up request answers: 402 with the terms, or 200 with the credit. */
export type TopupOutcome =
  | { status: 402; body: Offer["body"]; headers: Record<string, string> }
  | { status: 200; body: { balance_usdc: number; credited_usdc: number }; headers: Record<string, string> };

/** What a payment-identifier id found: a first run (its value), or the first run's stored result. */

/**
 * x402 top-ups (docs/payments.md "Top-ups (x402)"): step 1 offers the terms, step 2 verifies and settles the payment through the
 * facilitator, records the top-up in Postgres keyed by the settlement transaction (so a payment credits once)
 * and then credits the payer's wallet in Redis. `pay` is the same exchange for the model endpoints' paid calls.
 */
export class TopupService {
  /** Facilitator for EIP-3009 assets (FACILITATOR_URL or in-process) and for permit assets, by permit or Permit2 (in-process). */
  private readonly eip3009?: Facilitator;
  private readonly permit?: LocalFacilitator;
  /** Payments whose settlement could not be confirmed, credited later if the chain shows they moved. */
  readonly recovery: PaymentRecovery;
  /** x402 payment-identifier idempotency: /v1/topup and the paid calls go through `ids.once`. */
  readonly ids: PaymentIds;

  /**
   * The service on this configuration. The in-process facilitator (x402's, on viem) is loaded only when it is
   * configured (RPC_URL, RELAYER_PRIVATE_KEY and PAY_TO): a gateway without it never loads either.
   */
  static async open(cfg: PaymentsConfig, sql: Sql, credits: Credits): Promise<TopupService> {
    const local =
      cfg.rpcUrl && cfg.relayerPrivateKey && cfg.payTo
        ? new (await import("../../payments/local.ts")).LocalFacilitator(
            cfg.chain,
            cfg.rpcUrl,
            cfg.relayerPrivateKey,
            cfg.payTo as Address,
            cfg.facilitatorTimeoutMs,
          )
        : undefined;
    return new TopupService(cfg, sql, credits, local);
  }

  private constructor(
    private readonly cfg: PaymentsConfig,
    private readonly sql: Sql,
    private readonly credits: Credits,
    local: LocalFacilitator | undefined,
  ) {
    this.permit = local;
    this.recovery = new PaymentRecovery(cfg, sql, credits);
    this.ids = new PaymentIds(sql);
    if (cfg.facilitator === "http" && cfg.facilitatorUrl) this.eip3009 = new HttpFacilitator(cfg.facilitatorUrl, cfg.facilitatorTimeoutMs);
    else if (cfg.facilitator === "local") this.eip3009 = local;
  }

  get enabled(): boolean {
    return this.cfg.enabled;
  }

  /** The in-process facilitator, when configured: the one that settles `upto` (its relayer is the named facilitator). */
  get local(): LocalFacilitator | undefined {
    return this.permit;
  }

  /** The settlement network and its accepted assets. */
  get chain() {
    return this.cfg.chain;
  }

  /** Human-readable name of the settlement network. */
  get networkName(): string {
    return this.cfg.chain.name;
  }

  /** The terms for `microUsdc` at `resource`, every accepted asset (the one list offers are built from). */
  offer(microUsdc: number, resource: string, error?: string, description?: string): Offer {
    const offer = buildOffer(this.cfg.chain, this.cfg.payTo as Address, microUsdc, resource, this.permit?.relayer, description);
    if (error) {
      offer.body.error = error;
      offer.v2.error = error;
    }
    return offer;
  }

  /** The terms of a model call without a key for `microUsdc` (its hold) at `resource` (requirements.ts callOffer). */
  callOffer(microUsdc: number, resource: string, description: string): CallOffer {
    return callOffer(this.cfg.chain, this.cfg.payTo as Address, microUsdc, resource, description, this.permit?.relayer);
  }

  private paymentRequired(offer: Offer, extra: Record<string, string> = {}): TopupOutcome {
    return {
      status: 402,
      body: offer.body,
      headers: { "payment-required": encodeHeader(offer.v2), "cache-control": "no-store", ...extra },
    };
  }

  /** Step 1 (no payment header) or step 2. `microUsdc` is already validated (≥ 1 USD, ≤ 6 decimals). */
  async topup(microUsdc: number, paymentHeader: string | undefined, resource: string): Promise<TopupOutcome> {
    if (!this.enabled) throw new BareError(503, "top-ups are not configured on this deployment");
    const offer = this.offer(microUsdc, resource);
    if (offer.requirements.length === 0) throw new BareError(503, "no accepted asset can carry this amount exactly");
    if (paymentHeader === undefined) return this.paymentRequired(offer);
    const decoded = decodePaymentHeader(paymentHeader);
    const once = await this.ids.once(
      "topup",
      decoded,
      async (): Promise<TopupOutcome> => {
        const r = await this.pay(microUsdc, offer, decoded);
        if ("reason" in r) return this.paymentRequired(this.offer(microUsdc, resource, r.reason), r.headers);
        return { status: 200, body: { balance_usdc: r.balance, credited_usdc: r.credited }, headers: r.headers };
      },
      (out) => (out.status === 200 ? (out as unknown as Record<string, unknown>) : undefined),
    );
    return "fresh" in once ? once.fresh : (once.replay as unknown as TopupOutcome);
  }

  /**
   * Verifies, settles and credits one decoded payment against `offer`, the terms for `microUsdc` (400 when it
   * answers none of its terms).
   * Credits `wallet`, else the payer. A check is opened before settling, so a gateway killed between the transfer
   * and the credit still credits it (recovery reads the chain); the credit closes it.
   */
  async pay(microUsdc: number, offer: Offer, decoded: Record<string, unknown>, wallet?: string): Promise<Paid | Refused> {
    const payment = await matchPayment(decoded, offer.requirements, this.cfg.chain);
    // No money moves while Postgres is down: the 503 (app error handler) comes before the facilitator is asked,
    // at once when PgHealth already knows. (A Postgres failure after settling still credits, through the outbox.)
    await this.sql`SELECT 1`;
    const facilitator = payment.kind === "eip3009" ? this.eip3009 : this.permit;
    if (!facilitator) throw new BareError(503, "no facilitator for this asset");

    const verdict = await unavailableAs503(() => facilitator.verify(payment.payload, payment.requirements));
    if (!verdict.isValid) {
      log.info("payment refused by the facilitator", { reason: verdict.invalidReason, payer: payment.payer });
      return refused(payment, verdict.invalidReason ?? "invalid_payment");
    }
    // The chain's height before settling: where recovery searches if the outcome stays unknown.
    const fromBlock = await this.recovery.height();
    await this.recovery.open(payment, microUsdc, "settling", fromBlock, undefined, { wallet, beforeSettle: true });
    const settled = await settlePayment(facilitator, this.recovery, payment, microUsdc, fromBlock, wallet);
    if (!settled.success || !TX_HASH.test(settled.transaction)) {
      log.warn("payment settlement failed", { reason: settled.errorReason, payer: payment.payer });
      // The facilitator may have sent the transfer before it failed (a receipt that timed out): the chain decides.
      await this.recovery.open(payment, microUsdc, `settle failed: ${settled.errorReason ?? "unknown"}`, fromBlock, settled.transaction, {
        wallet,
      });
      return refused(payment, settled.errorReason ?? "settlement_failed");
    }
    const tx = settled.transaction.toLowerCase();
    return creditSettled(this.credits, this.recovery, this.cfg.chain.caip2, payment, microUsdc, tx, wallet ?? payment.payer);
  }

  /** Top-ups of a wallet, newest first. */
  async history(wallet: string) {
    const rows = await this.sql<{ id: number; amount_usdc: number; tx_hash: string; created_at: Date }[]>`
      SELECT id, amount_usdc, tx_hash, created_at FROM credits
      WHERE wallet = ${wallet} AND kind = 'topup' ORDER BY id DESC LIMIT 1000`;
    return {
      wallet,
      network: this.networkName,
      topups: rows.map((r) => ({ id: r.id, amount_usdc: r.amount_usdc, tx_hash: r.tx_hash, created_at: r.created_at.toISOString() })),
    };
  }
}
