import { withCharge } from "../../providers/charged.ts";
import { billedMicro, estimateUsage, outcomeUsage } from "../../tariff/index.ts";
import type { Holds } from "../../billing/holds.ts";
import { ApiError } from "../../errors.ts";
import type { Ledger } from "../../ledger/ledger.ts";
import { usageBody } from "../../providers/openai/wire.ts";
import type { DoorStream } from "../../providers/types.ts";
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

  /** A provider call that failed before its answer: the hold is released and the client gets the spec's error. */
  private async failed(call: Call, e: unknown, timedOut: boolean, sent: number): Promise<never> {
    call.trace.upstreamMs = performance.now() - sent;
    await this.holds.release(call);
    if (e instanceof ApiError) throw e;
    if (timedOut) {
      upstreamFailed(call, "timeout");
      throw new ApiError("UPSTREAM_DEADLINE");
    }
    upstreamFailed(call, "network", { error: e });
    throw providerFailed(call);
  }

  /**
   * A JSON answer: the provider's usage is the charge, or the counted usage when it reports none. `reshape` is a
   * front door's (AnswerShape.json): the chat answer's text → what its client reads.
   */
  async single(call: Call, url: string, init: RequestInit, reshape?: (chat: string, answer?: object) => string): Promise<Response> {
    let text: string;
    const sent = performance.now();
    try {
      const res = await fetch(url, { ...init, signal: AbortSignal.timeout(this.upstreamTimeoutMs) });
      if (!res.ok) throw await upstreamFailure(call, res);
      text = await res.text();
    } catch (e) {
      return this.failed(call, e, isTimeout(e), sent);
    }
    call.trace.upstreamMs = performance.now() - sent;

    let parsed;
    try {
      parsed = call.adapter.parse(text, call.model.id);
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

  /** An SSE stream, metered as it passes (and translated by a front door's `door`); settled at its end. */
  async streamed(call: Call, url: string, init: RequestInit, includeUsage: boolean, door?: DoorStream): Promise<Response> {
    const deadline = new IdleDeadline(this.upstreamTimeoutMs);
    let res: Response;
    const sent = performance.now();
    deadline.arm();
    try {
      res = await fetch(url, { ...init, signal: deadline.signal });
      if (!res.ok || !res.body) throw await upstreamFailure(call, res);
      deadline.disarm();
    } catch (e) {
      deadline.close();
      return this.failed(call, e, deadline.passed, sent);
    }
    call.trace.upstreamMs = performance.now() - sent;

    const { holds, ledger, maxStreamMs } = this;
    const metered = new MeteredStream(call, res.body, { holds, ledger, deadline, includeUsage, maxStreamMs, door });
    // The access-log line waits for the stream's end, when its charge is known.
    call.trace.streamEnd = metered.ended;
    return new Response(metered.body, {
      headers: { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive", ...call.headers },
    });
  }
}
