import { deadlineSignal } from "../../deadline.ts";
import { withCharge } from "../../providers/charged.ts";
import { billedMicro, estimateUsage, outcomeUsage } from "../../tariff/index.ts";
import type { Holds } from "../../billing/holds.ts";
import { ApiError } from "../../errors.ts";
import type { Ledger } from "../../ledger/ledger.ts";
import { usageBody } from "../../providers/openai/wire.ts";
import type { Model } from "../../providers/catalog.ts";
import type { DoorStream, ProviderAdapter } from "../../providers/types.ts";
import type { ReserveBound } from "../../tariff/index.ts";
import { type Call, providerFailed, upstreamFailed, upstreamFailure } from "./call.ts";
import { IdleDeadline } from "./idleDeadline.ts";
import { MeteredStream } from "./meteredStream.ts";

function isTimeout(e: unknown): boolean {
  return e instanceof Error && (e.name === "TimeoutError" || e.name === "AbortError");
}

/**
 * The provider call of a held request, and what follows it: its usage settled behind the answer, or its hold
 * released when the provider fails before answering. JSON answers here; a stream's end is MeteredStream's.
 */
export class Forwarder {
  constructor(
    private readonly holds: Holds,
    /** Keeps a long stream's hold alive (extendHold) while it runs. */
    private readonly ledger: Pick<Ledger, "extendHold" | "holdRefreshMs">,
    private readonly upstreamTimeoutMs: number,
    /** A stream still running after this long is stopped and charged for what it produced (STREAM_MAX_MS). */
    private readonly maxStreamMs: number,
  ) {}

  /**
   * A request whose provider call failed before its answer: the hold is released and the client gets the spec's
   * error (of the model it asked for, when every model of its chain failed).
   */
  private async failed(call: Call, error: ApiError, sent: number): Promise<never> {
    call.trace.upstreamMs = performance.now() - sent;
    await this.holds.release(call);
    throw error;
  }

  /** The spec's error for a provider call that failed before its answer, counted and logged (a thrown ApiError already was). */
  private failure(call: Call, e: unknown, timedOut: boolean): ApiError {
    if (e instanceof ApiError) return e;
    if (timedOut) {
      upstreamFailed(call, "timeout");
      return new ApiError("UPSTREAM_DEADLINE");
    }
    upstreamFailed(call, "network", { error: e });
    return providerFailed(call);
  }

  /**
   * The call goes to `a` next: what it reports and how it is billed become that model's (a failover's hold is the
   * dearest of its chain's, so it covers whichever serves: ChatService).
   */
  private aim(call: Call, a: Attempt): void {
    call.model = a.model;
    call.adapter = a.adapter;
    call.bound = a.bound;
    call.headers["x-served-model"] = a.model.id;
  }

  /**
   * A JSON answer: the provider's usage is the charge, or the counted usage when it reports none. Each attempt is
   * tried in turn while its provider fails before answering (no connection, its deadline, 429, 5xx); a 4xx other
   * than 429 is passed back at once. `reshape` is a front door's (AnswerShape.json) for the attempt's answer: the
   * chat answer's text → what its client reads.
   */
  async single(call: Call, attempts: Attempt[]): Promise<Response> {
    let text!: string;
    let a!: Attempt;
    let first: ApiError | undefined;
    const sent = performance.now();
    for (let i = 0; ; i++) {
      a = attempts[i]!;
      this.aim(call, a);
      const last = i === attempts.length - 1;
      let error: ApiError;
      try {
        // On the shared deadline clock (deadline.ts): no timer or AbortController per request; the fetch, or the
        // read of its body, fails with an AbortError once the deadline passes.
        const { res, body } = await answerOf(a, deadlineSignal(this.upstreamTimeoutMs));
        if (res.ok) {
          text = body;
          break;
        }
        error = await upstreamFailure(call, res, body);
        if (!failsOver(res.status)) return this.failed(call, error, sent);
      } catch (e) {
        error = this.failure(call, e, isTimeout(e));
      }
      first ??= error;
      if (last) return this.failed(call, first, sent);
    }
    call.trace.upstreamMs = performance.now() - sent;
    const reshape = a.reshape;

    let parsed;
    try {
      parsed = call.adapter.parse(text, call.asked);
    } catch (e) {
      await this.holds.release(call);
      upstreamFailed(call, "bad_body", { error: e });
      throw providerFailed(call);
    }
    const headers = { "content-type": "application/json", ...call.headers };
    if (parsed.usage) {
      // The answer's usage says what the request was charged (charge_usdc), as every usage the gateway answers does.
      const charge = billedMicro(call.model, parsed.usage);
      await this.holds.settleBehind(call, parsed.usage);
      const usage = (parsed.answer as { usage?: Record<string, unknown> } | undefined)?.usage;
      if (usage && typeof usage === "object") usage.charge_usdc = charge;
      const json = withCharge(parsed.json, charge);
      return new Response(reshape ? reshape(json, parsed.answer) : json, { headers });
    }
    // The provider reported no usage: the answer carries the counted usage it is billed at (the spec's usage field).
    const counted = outcomeUsage("counted", { counted: await estimateUsage(call, parsed.generated), bound: call.bound })!;
    await this.holds.settleBehind(call, counted);
    const answer = JSON.parse(parsed.json) as Record<string, unknown>;
    answer.usage = (call.adapter.clientFormat?.usage ?? usageBody)(counted, billedMicro(call.model, counted));
    const json = JSON.stringify(answer);
    return new Response(reshape ? reshape(json, answer) : json, { headers });
  }

  /**
   * An SSE stream, metered as it passes (and translated by a front door's `door`); settled at its end. Attempts
   * fail over as `single`'s do, before the first byte of an answer; once one streams, a failure is the stream's.
   */
  async streamed(call: Call, attempts: Attempt[]): Promise<Response> {
    let res!: Response;
    let a!: Attempt;
    let deadline!: IdleDeadline;
    let first: ApiError | undefined;
    const sent = performance.now();
    for (let i = 0; ; i++) {
      a = attempts[i]!;
      this.aim(call, a);
      const last = i === attempts.length - 1;
      deadline = new IdleDeadline(this.upstreamTimeoutMs);
      deadline.arm();
      let error: ApiError;
      try {
        res = await fetch(a.url, { ...a.init, signal: deadline.signal });
        if (res.ok && res.body) {
          deadline.disarm();
          break;
        }
        error = await upstreamFailure(call, res);
        deadline.close();
        if (!failsOver(res.status)) return this.failed(call, error, sent);
      } catch (e) {
        deadline.close();
        error = this.failure(call, e, deadline.passed);
      }
      first ??= error;
      if (last) return this.failed(call, first, sent);
    }
    call.trace.upstreamMs = performance.now() - sent;

    const { holds, ledger, maxStreamMs } = this;
    const door = a.door?.();
    const metered = new MeteredStream(call, res.body!, { holds, ledger, deadline, includeUsage: a.includeUsage, maxStreamMs, door });
    // The access-log line waits for the stream's end, when its charge is known.
    call.trace.streamEnd = metered.ended;
    return new Response(await metered.open(), {
      headers: { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive", ...call.headers },
    });
  }
}

/**
 * A JSON attempt's answer, its body read whole (an error answer's body as "" when it cannot be read); the signal's
 * AbortError once the deadline passes.
 */
async function answerOf(a: Attempt, signal: AbortSignal): Promise<{ res: Response; body: string }> {
  const res = await fetch(a.url, { ...a.init, signal });
  if (res.ok) return { res, body: await res.text() };
  // An error body cut by the deadline is the deadline's (504), as the answer's own read is.
  const body = await res.text().catch((e: unknown) => {
    if (signal.aborted) throw e;
    return "";
  });
  return { res, body };
}

/** A provider status another model of the chain is tried after: its own rate limit, or a server failure. */
function failsOver(status: number): boolean {
  return status === 429 || status >= 500;
}

/**
 * One model of a request's failover chain (its own first, then its catalog `fallbacks`), with its upstream
 * request shaped and bounded: what the forwarder sends when the ones before it failed before answering, and
 * how the front door reshapes that model's answer.
 */
export interface Attempt {
  model: Model;
  adapter: ProviderAdapter;
  url: string;
  init: RequestInit;
  /** The most this model can bill for the request (its prompt bound and completion cap, at its prices). */
  bound: ReserveBound;
  /** The client asked for the usage chunk, and reads chat's SSE (a native dialect writes the provider's own). */
  includeUsage: boolean;
  /** A front door's JSON reshaping (AnswerShape.json), unless the model answers in the door's own format. */
  reshape?: (chat: string, answer?: object) => string;
  /** A front door's stream translation, one per stream (AnswerShape.stream), unless the model answers natively. */
  door?: () => DoorStream;
}
