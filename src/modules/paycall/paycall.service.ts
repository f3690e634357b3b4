/**
 * Agents pay from the endpoint they call: a model endpoint's 402 INSUFFICIENT_BALANCE carries x402 terms (body for
 * v1 clients, PAYMENT-REQUIRED for v2), and the same request sent again with PAYMENT-SIGNATURE / X-PAYMENT pays
 * through the top-up service (verify, settle, credit the key's wallet), then is served as if the credit had always
 * been there. The money rules are /v1/topup's: this module only decides the amount and where the answer goes.
 */
import type { ApiKeyAuth } from "../../auth/apiKeys.ts";
import { NO_TOPUP_HINT, refusalError, TOPUP_HINT, withoutTopup } from "../../billing/refusals.ts";
import { ApiError, BareError } from "../../errors.ts";
import type { Ledger } from "../../ledger/ledger.ts";
import { claimedMicro } from "../../payments/payment.ts";
import { decodePaymentHeader } from "../../payments/paymentHeader.ts";
import type { PaymentsConfig } from "../../payments/config.ts";
import { encodeHeader } from "../../payments/requirements.ts";
import type { PayHook } from "../chat/chat.service.ts";
import type { TopupService } from "../topup/topup.service.ts";

const CENT = 10_000;

/** What a paid call tops up: the shortfall rounded up to a cent, at least `minimum` (µUSDC). */
export function offerAmount(available: number, required: number, minimum: number): number {
  const short = required - Math.max(0, available);
  return Math.max(minimum, Math.ceil(short / CENT) * CENT);
}

/** The facilitators' reasons for an authorization already spent: x402's EIP-3009 check and our permit path's. */
const SPENT = /nonce_already_used|nonce_used/;

/**
 * 402 PAYMENT_ALREADY_USED (with no offer) when a model call's payment was refused because it was spent before (the same payment
 * sent again); undefined for any other reason. `whose` says where the credit it bought went.
 */
export function alreadyUsed(reason: string, whose: string, headers?: Record<string, string>): ApiError | undefined {
  if (!SPENT.test(reason)) return undefined;
  return new ApiError({
    code: "PAYMENT_ALREADY_USED",
    message: `This payment was already used (${reason}); it moves no money again and nothing was charged. The credit it bought is ${whose}: send the request without a payment header to spend it, or sign a new payment`,
    headers,
  });
}

const describe = (micro: number) =>
  `Top up ${micro / 1_000_000} USD of gateway credit to the wallet of this API key, then serve the request`;

/** The offer on model endpoints' 402s and the paid retry. */
export class PaidCalls {
  constructor(
    private readonly cfg: PaymentsConfig,
    private readonly topup: TopupService,
    private readonly ledger: Ledger,
    private readonly auth: ApiKeyAuth,
    /** PUBLIC_URL: payment URLs are built on it, never on the request's Host. */
    private readonly publicUrl: string,
  ) {}

  /**
   * A model endpoint's 402 INSUFFICIENT_BALANCE with x402 terms for this request's URL (`PAYMENT-REQUIRED`, and
   * `x402Version` + `accepts` for the body); on a gateway that takes no payments, the same 402 pointing at the
   * operator instead of /v1/topup (which answers 503 there); any other error unchanged.
   */
  offerOn(error: unknown, request: Request): unknown {
    if (!(error instanceof ApiError) || error.code !== "INSUFFICIENT_BALANCE") return error;
    if (!this.topup.enabled) return error.extra?.topup === NO_TOPUP_HINT ? error : withoutTopup(error);
    const available = Number(error.extra?.available_usdc ?? 0);
    const required = Number(error.extra?.required_usdc ?? 0);
    const micro = offerAmount(available, required, this.cfg.callMinMicro);
    const offer = this.topup.offer(micro, this.publicUrl + new URL(request.url).pathname, undefined, describe(micro));
    if (offer.requirements.length === 0) return error;
    return error.with({
      headers: { "payment-required": encodeHeader(offer.v2), "cache-control": "no-store" },
      x402: { x402Version: 1, accepts: offer.body.accepts },
    });
  }

  /**
   * The paid retry: `call` serves the request with a PayHook the chat core runs once the request is admitted (key,
   * model, fields) and its hold known, before the reserve. The hook pays the payment's amount (at least the offer's)
   * to the key's wallet; the answer, whatever it is, then carries the receipt. A payment that moves nothing is 402
   * INSUFFICIENT_BALANCE with the reason (and a fresh offer, added by the error renderer).
   */
  async serve(header: string, request: Request, call: (pay: PayHook) => Promise<Response>): Promise<Response> {
    const resource = this.publicUrl + new URL(request.url).pathname;
    let receipt: Record<string, string> | undefined;
    const pay: PayHook = async (principal, required) => {
      // A revoked key pays for nothing it can use: refused (401) before any money moves, not after the settle.
      await this.auth.assertUsable(principal);
      const wallet = principal.wallet;
      const { balance, locked } = await this.ledger.reads.balance(wallet);
      const available = balance - locked;
      const refuse = (reason: string, headers?: Record<string, string>) =>
        new ApiError({
          code: "INSUFFICIENT_BALANCE",
          message: `Payment not accepted (${reason}); nothing was charged`,
          extra: { available_usdc: available, required_usdc: required, topup: this.topup.enabled ? TOPUP_HINT : NO_TOPUP_HINT },
          headers,
        });
      if (!this.topup.enabled) throw refuse("this gateway takes no payments");
      // A key whose own budget cannot cover the request would pay for nothing it can use: refused before any money moves.
      const budgetLeft = await this.ledger.reads.keyBudgetLeft(principal);
      if (budgetLeft !== null && budgetLeft < required)
        throw refusalError({ ok: false, refusal: "KEY_BUDGET_EXCEEDED", budgetLeft, required });
      try {
        const decoded = decodePaymentHeader(header);
        const asked = offerAmount(available, required, this.cfg.callMinMicro);
        const micro = claimedMicro(decoded, this.cfg.chain);
        // A resend under a payment-identifier id is looked up first: its payment is not judged again.
        const once = await this.topup.ids.once(
          `call:${wallet}`,
          decoded,
          () => {
            if (micro === undefined) throw refuse("the payment names no amount of an accepted asset");
            if (micro < asked) throw refuse(`it pays ${micro} µUSDC, below the ${asked} asked`);
            return this.topup.pay(micro, this.topup.offer(micro, resource, undefined, describe(micro)), decoded, wallet);
          },
          (r) => ("reason" in r ? undefined : { headers: r.headers }),
        );
        if ("replay" in once) {
          receipt = once.replay.headers as Record<string, string>;
          return;
        }
        const r = once.fresh;
        if ("reason" in r)
          throw alreadyUsed(r.reason, "in the wallet of the key that paid with it", r.headers) ?? refuse(r.reason, r.headers);
        receipt = r.headers;
      } catch (e) {
        // /v1/topup's bare errors in this route's words: a payment that does not fit is refused (402), not malformed.
        if (e instanceof BareError && e.status === 400) throw refuse(e.message);
        if (e instanceof BareError && e.status === 409) throw new ApiError({ code: "CONFLICT", message: e.message });
        if (e instanceof BareError) throw ApiError.unavailable(1, e.message);
        throw e;
      }
    };
    try {
      const answer = await call(pay);
      if (receipt) for (const [name, value] of Object.entries(receipt)) answer.headers.set(name, value);
      return answer;
    } catch (e) {
      // Paid, then refused (a concurrent spend left the wallet short again): the fresh offer comes with the receipt.
      if (receipt && e instanceof ApiError) throw e.with({ headers: receipt });
      throw e;
    }
  }
}
