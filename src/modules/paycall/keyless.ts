/**
 * Model calls without an API key (docs/payments.md): a wallet alone pays on the 402, or signs in with SIWx to spend
 * its balance. The 402 (PAYMENT_REQUIRED) carries x402 v2 terms for the call's hold; the retry with PAYMENT-SIGNATURE
 * (`exact`, EIP-3009) is settled before serving and credited to the payer's wallet, the call then held and charged
 * from it under the wallet's own key (auth/walletKeys.ts), the remainder kept; SIGN-IN-WITH-X charges the signer's
 * balance the same way. The money rules are the key calls' (one hold, one settle, the same ledger).
 */
import { type SiwxVerifier, SIGN_IN_WITH_X, SIWX_HEADER } from "../../auth/siwx.ts";
import type { WalletKeys } from "../../auth/walletKeys.ts";
import { ApiError, BareError } from "../../errors.ts";
import { claimedMicro } from "../../payments/payment.ts";
import { fingerprintOf, paymentIdOf } from "../../payments/paymentIds.ts";
import { log } from "../../log.ts";
import { decodePaymentHeader, paymentHeaderOf } from "../../payments/paymentHeader.ts";
import { encodeHeader } from "../../payments/requirements.ts";
import { traceOf } from "../../observe/trace.ts";
import type { Payer, PayHook } from "../chat/chat.service.ts";
import type { TopupService } from "../topup/topup.service.ts";
import { alreadyUsed, type PaidCalls } from "./paycall.service.ts";
import { type UptoCalls, UptoRefused, type UptoSettlement } from "./upto.ts";

const HOW_TO_PAY =
  "This call needs payment: resend it with PAYMENT-SIGNATURE (x402 v2, the terms in PAYMENT-REQUIRED: `upto` through a " +
  "Permit2 USDC authorization of at most the call's hold, settled for exactly what the call cost; or `exact` through an " +
  "EIP-3009 USDC authorization for the hold, the remainder kept as this wallet's balance), or sign in with the wallet " +
  "(SIGN-IN-WITH-X, x402's sign-in-with-x, the challenge in PAYMENT-REQUIRED's extensions) to spend its balance";

const describe = (micro: number) =>
  `One model call: at most ${micro / 1_000_000} USD (its hold); what it does not cost stays as the payer's balance`;

/** Whether a model request carries no credential at all (no Authorization, no x-api-key). */
export function withoutKey(headers: Headers): boolean {
  return headers.get("authorization") === null && headers.get("x-api-key") === null;
}

/**
 * Who pays for a model call, the same on every door: a request with no credential at all, on a gateway that takes
 * keyless calls, pays per call (x402 or SIWx: KeylessCalls); one with a payment header is paid from it (PaidCalls);
 * any other is the key's (`credential`: what the door reads a key from). `call` makes the request with whichever
 * hook applies.
 */
export function servePaying(
  s: { keyless: KeylessCalls; paidCalls: PaidCalls },
  request: Request,
  credential: string | null,
  call: (credential: string | null, pay?: PayHook, payer?: Payer) => Promise<Response>,
): Promise<Response> {
  const headers = request.headers;
  // `credential === null` first: the keyless check costs nothing on a keyed request.
  if (credential === null && s.keyless.enabled && withoutKey(headers))
    return s.keyless.serve(request, (payer) => call(null, undefined, payer));
  const payment = paymentHeaderOf(headers);
  if (payment === null) return call(credential);
  return s.paidCalls.serve(payment, request, (pay) => call(credential, pay));
}

// Where keyless calls' payment-identifier ids live (payment_ids.scope): one space, whoever pays.
const ID_SCOPE = "call:keyless";
// Headers of a first answer a resend under its payment-identifier id gets back.
const KEPT_HEADERS = ["content-type", "payment-response", "x-payment-response"];

/** A resend under a payment-identifier id: the first answer, served again, with no payment and no charge. */
class Replayed extends Error {
  constructor(readonly response: Response) {
    super("payment identifier replayed");
  }
}

/** A first answer as payment_ids keeps it for resends. */
interface KeptAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export class KeylessCalls {
  constructor(
    private readonly topup: TopupService,
    private readonly wallets: WalletKeys,
    private readonly siwx: SiwxVerifier,
    /** `upto`: settled after serving, for the charge. */
    readonly upto: UptoCalls,
    /** PUBLIC_URL: payment URLs are built on it, never on the request's Host. */
    private readonly publicUrl: string,
  ) {}

  /** Whether calls without a key are taken here (a gateway that takes payments); else they are 401 as before. */
  get enabled(): boolean {
    return this.topup.enabled;
  }

  /**
   * Serves a call without a key: `call` runs the door with a Payer the chat core asks once it knows the hold. The answer
   * carries the payment's receipt (PAYMENT-RESPONSE); a wallet short of credit gets the 402 with the terms again.
   */
  async serve(request: Request, call: (payer: Payer) => Promise<Response>): Promise<Response> {
    const resource = this.publicUrl + new URL(request.url).pathname;
    const host = request.headers.get("host");
    const payment = paymentHeaderOf(request.headers);
    const signIn = request.headers.get(SIWX_HEADER);
    let receipt: Record<string, string> | undefined;
    let id: string | undefined;
    let upto: string | undefined;
    let required = 0;
    const payer: Payer = async (micro) => {
      required = micro;
      if (payment === null && signIn === null) throw this.paymentRequired(micro, resource, host);
      if (payment === null) return { principal: await this.wallets.principal(await this.siwx.verify(signIn!)) };
      const decoded = this.decode(payment, micro, resource, host);
      // x402 payment-identifier: a resend of the same payload gets the first answer back (no payment, no charge); the
      // id with another payload is 409. A payment that moved nothing gives its id back.
      const claimed = await this.claimId(decoded, micro, resource, host);
      try {
        if ((decoded.accepted as { scheme?: unknown } | undefined)?.scheme === "upto") {
          const offered = this.topup.callOffer(micro, resource, describe(micro)).upto;
          if (!offered) throw this.paymentRequired(micro, resource, host, "this gateway does not settle upto");
          try {
            const a = await this.upto.authorize(decoded, offered, micro);
            upto = a.id;
            id = claimed;
            return { principal: a.principal, holdId: a.holdId };
          } catch (e) {
            if (e instanceof UptoRefused) throw this.paymentRequired(micro, resource, host, e.message);
            throw e;
          }
        }
        const paid = await this.pay(decoded, micro, resource, host);
        receipt = paid.receipt;
        id = claimed;
        return { principal: await this.wallets.principal(paid.payer) };
      } catch (e) {
        if (claimed !== undefined) await this.topup.ids.release(ID_SCOPE, claimed).catch(() => undefined);
        throw e;
      }
    };
    const trace = traceOf(request);
    try {
      const answer = await call(payer);
      const settled = upto === undefined ? answer : await this.settleUpto(upto, answer, () => trace.chargeUsdc ?? 0);
      if (receipt) for (const [name, value] of Object.entries(receipt)) settled.headers.set(name, value);
      return id === undefined ? settled : this.keep(id, settled);
    } catch (e) {
      if (e instanceof Replayed) return e.response;
      // An `upto` call that failed after its authorization was credited: settled for what it was charged (0 when its
      // hold was released), and its settlement told with the error.
      if (upto !== undefined && e instanceof ApiError)
        receipt = { "payment-response": encodeHeader(await this.upto.settle(upto, trace.chargeUsdc ?? 0)) };
      // Paid, and the call then failed: the id keeps the receipt (the payment moved), a resend gets this same error.
      if (id !== undefined && e instanceof ApiError) {
        const failed = e.with({ headers: receipt ?? {} }).toResponse();
        await this.finish(id, { status: failed.status, headers: keptHeaders(failed.headers), body: await failed.clone().text() });
      }
      // Paid or signed in, and still short (a concurrent spend): the terms again, with the receipt of what moved.
      if (e instanceof ApiError && e.code === "INSUFFICIENT_BALANCE" && required > 0) {
        const again = this.paymentRequired(required, resource, host, "this wallet's balance cannot cover the call's hold");
        throw receipt ? again.with({ headers: receipt }) : again;
      }
      if (receipt && e instanceof ApiError) throw e.with({ headers: receipt });
      throw e;
    }
  }

  /** 402 PAYMENT_REQUIRED with the terms of this call (its hold `micro`), and why a payment was refused, if one was. */
  paymentRequired(micro: number, resource: string, host: string | null, reason?: string, headers?: Record<string, string>): ApiError {
    const offer = this.topup.callOffer(micro, resource, describe(micro));
    offer.v2.extensions[SIGN_IN_WITH_X] = this.siwx.declaration(resource, host);
    if (reason) offer.v2.error = reason;
    return new ApiError({
      code: "PAYMENT_REQUIRED",
      message: reason ? `Payment not accepted (${reason}); nothing was charged. ${HOW_TO_PAY}` : HOW_TO_PAY,
      extra: { required_usdc: micro },
      headers: { ...headers, "payment-required": encodeHeader(offer.v2), "cache-control": "no-store" },
      x402: { x402Version: 1, accepts: offer.body.accepts },
    });
  }

  /**
   * An `exact` payment for this call: at least its hold, verified, settled and credited to the payer's wallet before
   * anything is served (TopupService.pay, the top-up's own path: recovery, Postgres first). A payment that moves
   * nothing is the 402 again with the reason; a payment-identifier id naming another payment is 409 CONFLICT.
   */
  /** The payment header decoded; a malformed one is the 402 again, with the reason. */
  private decode(header: string, micro: number, resource: string, host: string | null): Record<string, unknown> {
    try {
      return decodePaymentHeader(header);
    } catch (e) {
      if (e instanceof BareError) throw this.paymentRequired(micro, resource, host, e.message);
      throw e;
    }
  }

  /**
   * An `upto` call's answer, settled for its charge: a JSON answer once it is known (PAYMENT-RESPONSE), a stream just
   * before its `data: [DONE]` (or its end, on a door without one) as the SSE comment `: x402.settlement <JSON>`, which
   * SDKs skip. A client that leaves early: settled for what it was charged, behind.
   */
  private async settleUpto(id: string, answer: Response, charge: () => number): Promise<Response> {
    const sse = answer.headers.get("content-type")?.includes("text/event-stream") === true;
    if (!sse || answer.body === null) {
      const s = await this.upto.settle(id, charge());
      answer.headers.set("payment-response", encodeHeader(s));
      return answer;
    }
    const reader = answer.body.getReader();
    const encoder = new TextEncoder();
    const decoder = new TextDecoder();
    let settled: Promise<UptoSettlement> | undefined;
    const settle = () => (settled ??= this.upto.settle(id, charge()));
    const comment = async () => encoder.encode(`: x402.settlement ${JSON.stringify(await settle())}\n\n`);
    const DONE = "data: [DONE]";
    const body = new ReadableStream<Uint8Array>({
      async pull(ctrl) {
        const read = await reader.read();
        if (read.done) {
          if (!settled) ctrl.enqueue(await comment());
          ctrl.close();
          return;
        }
        const text = decoder.decode(read.value, { stream: true });
        const at = settled ? -1 : text.indexOf(DONE);
        if (at < 0) return ctrl.enqueue(read.value);
        if (at > 0) ctrl.enqueue(encoder.encode(text.slice(0, at)));
        ctrl.enqueue(await comment());
        ctrl.enqueue(encoder.encode(text.slice(at)));
      },
      async cancel(reason) {
        await reader.cancel(reason);
        void settle();
      },
    });
    return new Response(body, { status: answer.status, headers: answer.headers });
  }

  private async pay(
    decoded: Record<string, unknown>,
    micro: number,
    resource: string,
    host: string | null,
  ): Promise<{ receipt: Record<string, string>; payer: string }> {
    const refuse = (reason: string, headers?: Record<string, string>) => this.paymentRequired(micro, resource, host, reason, headers);
    try {
      const claimed = claimedMicro(decoded, this.topup.chain);
      if (claimed === undefined) throw refuse("the payment names no amount of an accepted asset");
      if (claimed < micro) throw refuse(`it pays ${claimed} µUSDC, below the call's hold of ${micro}`);
      const r = await this.topup.pay(claimed, this.topup.callOffer(claimed, resource, describe(claimed)), decoded);
      if ("reason" in r)
        throw alreadyUsed(r.reason, "in the payer's wallet (sign in with it for a key)", r.headers) ?? refuse(r.reason, r.headers);
      return { receipt: r.headers, payer: r.payer };
    } catch (e) {
      if (e instanceof BareError && e.status === 400) throw refuse(e.message);
      if (e instanceof BareError) throw ApiError.unavailable(1, e.message);
      throw e;
    }
  }

  /**
   * The payment's payment-identifier id, claimed for this payload (undefined: it names none). A resend of a payload
   * whose call is over throws Replayed with its first answer; the id naming another payload, or one still being
   * served, is 409 CONFLICT; a malformed id is the 402 with the reason.
   */
  private async claimId(
    decoded: Record<string, unknown>,
    micro: number,
    resource: string,
    host: string | null,
  ): Promise<string | undefined> {
    let id: string | undefined;
    try {
      id = paymentIdOf(decoded);
    } catch (e) {
      if (e instanceof BareError) throw this.paymentRequired(micro, resource, host, e.message);
      throw e;
    }
    if (id === undefined) return undefined;
    const claim = await this.topup.ids.claim(ID_SCOPE, id, fingerprintOf(decoded));
    if (claim.kind === "conflict") throw new ApiError({ code: "CONFLICT", message: "payment identifier already names another payment" });
    if (claim.kind === "busy")
      throw new ApiError({ code: "CONFLICT", message: "payment identifier in use by a request still being served; retry shortly" });
    if (claim.kind === "done") {
      const kept = claim.result as unknown as KeptAnswer;
      throw new Replayed(new Response(kept.body, { status: kept.status, headers: kept.headers }));
    }
    return id;
  }

  /**
   * The answer to a call paid under a payment-identifier id, kept for resends once it has been read whole (a stream
   * as its full text); the client reads it meanwhile as it comes.
   */
  private keep(id: string, answer: Response): Response {
    const headers = keptHeaders(answer.headers);
    if (answer.body === null) {
      void this.finish(id, { status: answer.status, headers, body: "" });
      return answer;
    }
    const [client, copy] = answer.body.tee();
    void new Response(copy)
      .text()
      .then((body) => this.finish(id, { status: answer.status, headers, body }))
      .catch((e) => log.warn("payment identifier: the first answer was not kept", { error: e }));
    return new Response(client, { status: answer.status, headers: answer.headers });
  }

  private finish(id: string, kept: KeptAnswer): Promise<void> {
    return this.topup.ids
      .finish(ID_SCOPE, id, kept as unknown as Record<string, unknown>)
      .catch((e) => log.warn("payment identifier not updated; a resend waits until it goes stale", { error: e }));
  }
}

function keptHeaders(headers: Headers): Record<string, string> {
  const kept: Record<string, string> = {};
  for (const name of KEPT_HEADERS) {
    const v = headers.get(name);
    if (v !== null) kept[name] = v;
  }
  return kept;
}
