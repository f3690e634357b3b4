import type { ApiKeyAuth } from "../../auth/apiKeys.ts";
import { ApiError } from "../../errors.ts";
import { LedgerRebuilding } from "../../ledger/fence.ts";
import type { KeyPrincipal, Ledger, ReserveOutcome } from "../../ledger/ledger.ts";
import { log } from "../../log.ts";
import { newTrace, type RequestTrace } from "../../observe/trace.ts";
import { withDeadline } from "../../deadline.ts";
import { DependencyDown, isRedisDown } from "../../outage.ts";
import { type Catalog, unknownModelReason } from "../../providers/catalog.ts";
import { refuseRepricingFields } from "../../providers/fields.ts";
import { refuseOverlongPrompt } from "../../providers/promptFloor.ts";
import { adapterFor } from "../../providers/index.ts";
import { completionCap, reserveFor } from "../../providers/reserve.ts";
import type { ChatRequest } from "../../providers/types.ts";
import type { PendingSettles } from "../../store/pendingSettles.ts";
import { type Call, estimateUsage, upstreamFailed, upstreamFailure, usageBody } from "./call.ts";
import { IdleDeadline } from "./idleDeadline.ts";
import { MeteredStream } from "./meteredStream.ts";
import { refusalError } from "./refusals.ts";
import { Settler } from "./settler.ts";

// A reserve takes well under a millisecond in Redis; one that has not answered in this long is not coming soon.
const RESERVE_DEADLINE_MS = 2_000;

function isTimeout(e: unknown): boolean {
  return e instanceof Error && (e.name === "TimeoutError" || e.name === "AbortError");
}

/**
 * POST /v1/chat/completions: authenticate, reserve (one Redis call), call the provider under the deadline,
 * then settle the actual usage or release the hold (one Redis call). Nothing else touches Redis on this path.
 */
export class ChatService {
  /** Settles and releases, run behind the answers. */
  private readonly settler: Settler;

  constructor(
    private readonly auth: ApiKeyAuth,
    private readonly ledger: Ledger,
    private readonly catalog: Catalog,
    private readonly upstreamTimeoutMs: number,
    pending: PendingSettles,
    /** A stream still running after this long is stopped and charged for what it produced (STREAM_MAX_MS). */
    private readonly maxStreamMs = 2 * 3600_000,
  ) {
    this.settler = new Settler(ledger, pending);
  }

  async complete(authorization: string | null, body: ChatRequest, trace: RequestTrace = newTrace()): Promise<Response> {
    // What reaches the provider is the gateway's decision: a field that could raise its bill behind the hold
    // is refused before anything else happens (README "Money rules").
    refuseRepricingFields(body);
    const principal = await this.auth.fromHeader(authorization);
    trace.keyId = principal.keyId;
    trace.wallet = principal.wallet;
    trace.model = String(body.model).slice(0, 200);
    const model = this.catalog.models.get(body.model);
    if (!model) throw new ApiError({ code: "UNKNOWN_MODEL", message: unknownModelReason(this.catalog, String(body.model)) });
    // Before the hold, whose prompt bound stops at the context window: a prompt that cannot fit is 400, not 402.
    refuseOverlongPrompt(model, body);

    const stream = body.stream === true;
    // The reserve is what the provider can bill at most (reserve.ts): the prompt's upper bound from the upstream
    // body, images at their maximum, what the provider adds unseen, at most the context window; plus the
    // completion cap per choice, decided here once and sent upstream as it is held.
    const adapter = adapterFor(model.provider.type);
    const maxTokens = completionCap(model, body);
    const { url, init, hiddenPromptTokens } = adapter.request({ model, body, stream, maxTokens });
    const bound = reserveFor(model, body, init.body as string, hiddenPromptTokens, maxTokens);

    const holdId = crypto.randomUUID();
    const { rateRemaining } = await this.reserve(principal, holdId, bound.micro);
    const call: Call = { principal, holdId, model, adapter, body, bound, headers: { "x-ratelimit-remaining": String(rateRemaining) }, trace };
    trace.provider = model.provider.name;
    trace.stream = stream;
    return stream ? this.streamed(call, url, init, body.stream_options?.include_usage === true) : this.single(call, url, init);
  }

  /** Waits for settles still in flight: shutdown calls it before the final outbox drain. */
  idle(): Promise<void> {
    return this.settler.idle();
  }

  /** Shutdown ran out of time: the settles still running go to Postgres, posted at the next start (once). */
  keepInFlight(): Promise<number> {
    return this.settler.keepInFlight();
  }

  /**
   * The reserve, answering 503 fast when Redis cannot: at once while the ledger's connection is down (nothing is
   * sent, so nothing is held), and after RESERVE_DEADLINE_MS when Redis does not answer. A reserve whose reply
   * was lost (connection dropped, deadline) may still have opened its hold, now or when a queued command runs on
   * reconnect, or once a cluster's failover is over: a release by its hold id follows its outcome, behind the
   * answer (the request's second and last Redis call); should that fail too, the sweeper expires the hold.
   */
  private async reserve(principal: KeyPrincipal, holdId: string, amount: number): Promise<{ rateRemaining: number }> {
    if (!this.ledger.connected) throw ApiError.unavailable(1);
    let outcome: ReserveOutcome;
    const reserving = this.ledger.reserve(principal, holdId, amount);
    try {
      outcome = await withDeadline(RESERVE_DEADLINE_MS, () => reserving, () => DependencyDown.late("redis", "reserve", RESERVE_DEADLINE_MS));
    } catch (e) {
      // Refused by the fence: nothing was held.
      if (e instanceof LedgerRebuilding) throw e;
      this.settler.releaseBehind(principal, holdId, reserving);
      if (!isRedisDown(e)) throw e;
      log.warn("reserve failed: Redis unavailable; answered 503 and releasing the hold behind", { hold: holdId, error: e });
      throw ApiError.unavailable(1);
    }
    if (!outcome.ok) throw refusalError(outcome);
    return outcome;
  }

  /** A provider call that failed before its answer: the hold is released and the client gets the spec's error. */
  private async failed(call: Call, e: unknown, timedOut: boolean, sent: number): Promise<never> {
    call.trace.upstreamMs = performance.now() - sent;
    await this.settler.release(call);
    if (e instanceof ApiError) throw e;
    if (timedOut) {
      upstreamFailed(call, "timeout");
      throw new ApiError("UPSTREAM_DEADLINE");
    }
    upstreamFailed(call, "network", { error: e });
    throw new ApiError("UPSTREAM_ERROR");
  }

  private async single(call: Call, url: string, init: RequestInit): Promise<Response> {
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
      await this.settler.release(call);
      upstreamFailed(call, "bad_body", { error: e });
      throw new ApiError("UPSTREAM_ERROR");
    }
    const headers = { "content-type": "application/json", ...call.headers };
    if (parsed.usage) {
      this.settler.settleBehind(call, parsed.usage);
      return new Response(parsed.json, { headers });
    }
    // The provider reported no usage: the answer carries the counted usage it is billed at (the spec's usage field).
    const counted = await estimateUsage(call, parsed.generated);
    this.settler.settleBehind(call, counted);
    const answer = JSON.parse(parsed.json) as Record<string, unknown>;
    answer.usage = usageBody(counted);
    return new Response(JSON.stringify(answer), { headers });
  }

  private async streamed(call: Call, url: string, init: RequestInit, includeUsage: boolean): Promise<Response> {
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

    const { settler, ledger, maxStreamMs } = this;
    const metered = new MeteredStream(call, res.body, { settler, ledger, deadline, includeUsage, maxStreamMs });
    // The access-log line waits for the stream's end, when its charge is known.
    call.trace.streamEnd = metered.ended;
    return new Response(metered.body, {
      headers: { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive", ...call.headers },
    });
  }
}
