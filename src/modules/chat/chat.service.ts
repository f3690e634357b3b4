import type { ApiKeyAuth } from "../../auth/apiKeys.ts";
import { ApiError } from "../../errors.ts";
import type { ChargeDetails, KeyPrincipal, Ledger } from "../../ledger/ledger.ts";
import { log, redactText } from "../../log.ts";
import { metrics } from "../../observe/metrics.ts";
import { newTrace, type RequestTrace } from "../../observe/trace.ts";
import { isRedisDown, withinDeadline } from "../../outage.ts";
import { type Catalog, type Model, unknownModelReason } from "../../providers/catalog.ts";
import { refuseRepricingFields } from "../../providers/fields.ts";
import { adapterFor } from "../../providers/index.ts";
import { billedMicro, costMicro, type Usage } from "../../providers/pricing.ts";
import { SseDecoder } from "../../providers/sse.ts";
import { completionCap, reserveFor, type ReserveBound } from "../../providers/reserve.ts";
import { countPromptTokens, countTokens } from "../../providers/tokens.ts";
import type { ChatRequest, ProviderAdapter, StreamStep } from "../../providers/types.ts";
import type { PendingSettle, PendingSettles } from "../../store/pendingSettles.ts";
import { checkHoldOverrun } from "./holdOverruns.ts";

const encoder = new TextEncoder();
const DONE = encoder.encode("data: [DONE]\n\n");
const STREAM_ERROR = encoder.encode(
  `data: ${JSON.stringify({ error: { message: "The model provider failed during the stream", type: "upstream_error" } })}\n\n`,
);

/** One request in flight: who pays, which hold, what the prompt is known to cost at most. */
interface Call {
  principal: KeyPrincipal;
  holdId: string;
  model: Model;
  adapter: ProviderAdapter;
  /** The client's request, counted with the tokenizer when the provider reports no usage. */
  body: ChatRequest;
  /** What the hold covers: a charge above it is a defect (logged and counted), charged all the same. */
  bound: ReserveBound;
  headers: Record<string, string>;
  /** The access-log line and metrics of this request. */
  trace: RequestTrace;
}

// The status of a non-2xx answer decides the error; its body is read (to classify it) but never passed on. The
// operator sees it: logged truncated and redacted, counted by provider and status.
async function upstreamFailure(call: Call, res: Response): Promise<ApiError> {
  const detail = await res.text().catch(() => "");
  upstreamFailed(call, String(res.status), { upstream_status: res.status, body: redactText(detail.slice(0, 500)) });
  return call.adapter.upstreamError(res.status, detail);
}

/** Counts and logs (warn) a provider failure: an HTTP status, or timeout, network, bad_body, stream_broken. */
function upstreamFailed(call: Call, status: string, fields: Record<string, unknown> = {}): void {
  const provider = call.model.provider.name;
  metrics.upstreamErrors.inc({ provider, status });
  log.warn("upstream failure", { request_id: call.trace.id, provider, model: call.model.id, status, ...fields });
}

/** OpenAI's usage object for a billed usage. */
function usageBody(u: Usage) {
  return { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens, total_tokens: u.prompt_tokens + u.completion_tokens };
}

/** The stream's final usage chunk (choices empty), as OpenAI sends it when asked with include_usage. */
function usageChunk(call: Call, u: Usage): string {
  const created = Math.floor(Date.now() / 1000);
  return JSON.stringify({ id: `chatcmpl-${call.holdId}`, object: "chat.completion.chunk", created, model: call.model.id, choices: [], usage: usageBody(u) });
}

function isTimeout(e: unknown): boolean {
  return e instanceof Error && (e.name === "TimeoutError" || e.name === "AbortError");
}

/**
 * POST /v1/chat/completions: authenticate, reserve (one Redis call), call the provider under the deadline,
 * then settle the actual usage or release the hold (one Redis call). Nothing else touches Redis on this path.
 */
export class ChatService {
  /** Settles running behind their answers, with what is needed to keep them if the process must stop first. */
  private readonly settling = new Map<Promise<void>, PendingSettle>();
  /** Releases of holds whose reserve reply was lost. */
  private readonly releasing = new Set<Promise<void>>();

  constructor(
    private readonly auth: ApiKeyAuth,
    private readonly ledger: Ledger,
    private readonly catalog: Catalog,
    private readonly upstreamTimeoutMs: number,
    private readonly pending: PendingSettles,
    /** A stream still running after this long is stopped and charged for what it produced (STREAM_MAX_MS). */
    private readonly maxStreamMs = 2 * 3600_000,
  ) {}

  async complete(authorization: string | null, body: ChatRequest, trace: RequestTrace = newTrace()): Promise<Response> {
    // What reaches the provider is the gateway's decision: a field that could raise its bill behind the hold
    // is refused before anything else happens (README "Money rules").
    refuseRepricingFields(body);
    const principal = await this.auth.fromHeader(authorization);
    trace.keyId = principal.keyId;
    trace.wallet = principal.wallet;
    trace.model = String(body.model).slice(0, 200);
    const model = this.catalog.models.get(body.model);
    if (!model) throw new ApiError("UNKNOWN_MODEL", unknownModelReason(this.catalog, String(body.model)));

    const stream = body.stream === true;
    // The reserve is what the provider can bill at most (reserve.ts): the prompt's upper bound from the upstream
    // body, images at their maximum, what the provider adds unseen, at most the context window; plus the
    // completion cap (always sent upstream, clamped) per choice.
    const adapter = adapterFor(model.provider.type);
    const { url, init, hiddenPromptTokens } = adapter.request({ model, body, stream, maxTokens: completionCap(model, body) });
    const bound = reserveFor(model, body, init.body as string, hiddenPromptTokens);

    const holdId = crypto.randomUUID();
    const { rateRemaining } = await this.reserve(principal, holdId, bound.micro);
    const call: Call = {
      principal,
      holdId,
      model,
      adapter,
      body,
      bound,
      headers: { "x-ratelimit-remaining": String(rateRemaining) },
      trace,
    };
    trace.provider = model.provider.name;
    trace.stream = stream;
    return stream ? this.streamed(call, url, init, body.stream_options?.include_usage === true) : this.single(call, url, init);
  }

  /**
   * The reserve, answering 503 fast when Redis cannot: at once while the ledger's connection is down (nothing is
   * sent, so nothing is held), and after RESERVE_DEADLINE_MS when Redis does not answer. A reserve whose reply
   * was lost (connection dropped, deadline) may still have opened its hold, now or when a queued command runs on
   * reconnect: a release by its hold id follows it on the same connection, behind the answer (the request's
   * second and last Redis call); should that fail too, the sweeper expires the hold with its lifetime.
   */
  private async reserve(principal: KeyPrincipal, holdId: string, amount: number) {
    if (!this.ledger.scripts.client.connected) throw new ApiError("SERVICE_UNAVAILABLE", undefined, undefined, undefined, { "retry-after": "1" });
    try {
      return await withinDeadline(this.ledger.reserve(principal, holdId, amount), RESERVE_DEADLINE_MS, "redis", "reserve");
    } catch (e) {
      if (e instanceof ApiError) throw e;
      this.releaseBehind(principal, holdId);
      if (!isRedisDown(e)) throw e;
      log.warn("reserve failed: Redis unavailable; answered 503 and releasing the hold behind", { hold: holdId, error: e });
      throw new ApiError("SERVICE_UNAVAILABLE", undefined, undefined, undefined, { "retry-after": "1" });
    }
  }

  /** Releases a hold that may or may not exist, without making anyone wait; shutdown waits for it (`idle`). */
  private releaseBehind(principal: KeyPrincipal, holdId: string): void {
    const p: Promise<void> = this.release({ principal, holdId }).finally(() => this.releasing.delete(p));
    this.releasing.add(p);
  }

  private async single(call: Call, url: string, init: RequestInit): Promise<Response> {
    let text: string;
    const sent = performance.now();
    try {
      const res = await fetch(url, { ...init, signal: AbortSignal.timeout(this.upstreamTimeoutMs) });
      if (!res.ok) throw await upstreamFailure(call, res);
      text = await res.text();
    } catch (e) {
      call.trace.upstreamMs = performance.now() - sent;
      await this.release(call);
      if (e instanceof ApiError) throw e;
      if (isTimeout(e)) {
        upstreamFailed(call, "timeout");
        throw new ApiError("UPSTREAM_DEADLINE");
      }
      upstreamFailed(call, "network", { error: e });
      throw new ApiError("UPSTREAM_ERROR");
    }
    call.trace.upstreamMs = performance.now() - sent;

    let parsed;
    try {
      parsed = call.adapter.parse(text, call.model.id);
    } catch (e) {
      await this.release(call);
      upstreamFailed(call, "bad_body", { error: e });
      throw new ApiError("UPSTREAM_ERROR");
    }
    if (parsed.usage) {
      this.settleBehind(call, parsed.usage);
      return new Response(parsed.json, { headers: { "content-type": "application/json", ...call.headers } });
    }
    // The provider reported no usage: the answer carries the counted usage it is billed at (the spec's usage field).
    const counted = await this.estimate(call, parsed.generated);
    this.settleBehind(call, counted);
    const answer = JSON.parse(parsed.json) as Record<string, unknown>;
    answer.usage = usageBody(counted);
    return new Response(JSON.stringify(answer), { headers: { "content-type": "application/json", ...call.headers } });
  }

  private async streamed(call: Call, url: string, init: RequestInit, includeUsage: boolean): Promise<Response> {
    const abort = new AbortController();
    const timeoutMs = this.upstreamTimeoutMs;
    // The deadline runs only while the gateway waits on the provider (first byte, then each read): a client that
    // reads slowly must not make a working upstream look idle, which would release the hold of a served answer.
    let idle: ReturnType<typeof setTimeout> | undefined;
    const arm = () => (idle = setTimeout(() => abort.abort(), timeoutMs));
    const disarm = () => clearTimeout(idle);

    let res: Response;
    const sent = performance.now();
    arm();
    try {
      res = await fetch(url, { ...init, signal: abort.signal });
      if (!res.ok || !res.body) throw await upstreamFailure(call, res);
      disarm();
    } catch (e) {
      disarm();
      call.trace.upstreamMs = performance.now() - sent;
      await this.release(call);
      if (e instanceof ApiError) throw e;
      if (abort.signal.aborted) {
        upstreamFailed(call, "timeout");
        throw new ApiError("UPSTREAM_DEADLINE");
      }
      upstreamFailed(call, "network", { error: e });
      throw new ApiError("UPSTREAM_ERROR");
    }
    call.trace.upstreamMs = performance.now() - sent;

    const reader = res.body.getReader();
    const decoder = new SseDecoder();
    const translate = call.adapter.openStream(includeUsage, call.model.id);
    let usage: Usage | undefined;
    let promptTokens: number | undefined;
    let generated = "";
    let resolved = false;
    let ended!: () => void;
    const streamEnded = new Promise<void>((resolve) => (ended = resolve));
    const started = Date.now();

    // What the stream has cost so far: the provider's final usage, else its prompt count (if it gave one) or the
    // tokenizer's, plus the tokenizer's count of everything generated (text, reasoning, tool calls).
    const cost = async (): Promise<Usage> => usage ?? (await this.estimate(call, generated, promptTokens));

    // A stream can outlive a hold's lifetime (a long answer, a slow reader): while it runs, its hold is kept from
    // expiring, or the sweeper would hand the credit to other requests and the settle would overdraw.
    const keepHold = setInterval(() => void this.ledger.extendHold(call.principal, call.holdId).catch(() => {}), this.ledger.holdRefreshMs);
    // A client that keeps the connection but stops reading would keep it (and the hold) forever: at the time cap
    // the stream ends and is charged what it produced, which the provider bills (releasing it would hand the
    // client that output for free); the upstream is stopped once the settle is under way.
    let client: ReadableStreamDefaultController<Uint8Array> | undefined;
    const cap = setTimeout(async () => {
      disarm();
      clearInterval(keepHold);
      if (resolved) return;
      resolved = true;
      this.settleBehind(call, await cost());
      ended();
      abort.abort();
      try {
        client?.enqueue(DONE);
        client?.close();
      } catch {
        // the client went away meanwhile
      }
    }, this.maxStreamMs);

    const finish = async (ctrl: ReadableStreamDefaultController<Uint8Array>, ok: boolean) => {
      disarm();
      clearInterval(keepHold);
      clearTimeout(cap);
      if (resolved) return; // the client cancelled first; cancel() resolved the hold
      resolved = true;
      if (ok) {
        const billed = await cost();
        this.settleBehind(call, billed);
        // The client asked for the usage chunk and the provider sent none: it gets the counted usage it pays for.
        if (includeUsage && usage === undefined) ctrl.enqueue(encoder.encode(`data: ${usageChunk(call, billed)}\n\n`));
      } else {
        // Spec: a provider failure or an idle deadline mid-stream releases the hold; nothing is charged.
        upstreamFailed(call, abort.signal.aborted ? "timeout" : "stream_broken", { after_ms: Math.round(Date.now() - started) });
        abort.abort();
        await this.release(call);
        ctrl.enqueue(STREAM_ERROR);
      }
      ctrl.enqueue(DONE);
      ctrl.close();
      ended();
    };

    const body = new ReadableStream<Uint8Array>({
      start: (ctrl) => {
        client = ctrl;
      },
      pull: async (ctrl) => {
        // Each pull forwards one upstream read; the loop only repeats when a read produced nothing to send.
        for (;;) {
          let read: Awaited<ReturnType<typeof reader.read>>;
          arm();
          try {
            read = await reader.read();
          } catch {
            return finish(ctrl, false);
          } finally {
            disarm();
          }
          if (resolved) return; // cancelled while the read was under way
          const payloads = read.done ? decoder.end() : decoder.push(read.value);
          let out = "";
          let done = false;
          let failed = false;
          for (const payload of payloads) {
            let step: StreamStep;
            try {
              step = translate(payload);
            } catch {
              step = { failed: true };
            }
            if (step.failed) {
              failed = true;
              break;
            }
            if (step.promptTokens !== undefined) promptTokens = step.promptTokens;
            if (step.usage) usage = step.usage;
            if (step.generated) generated += step.generated;
            if (step.chunk) out += `data: ${step.chunk}\n\n`;
            if (step.done) done = true;
          }
          // What arrived before a failure in the same read still reaches the client.
          if (out) ctrl.enqueue(encoder.encode(out));
          if (failed) return finish(ctrl, false);
          // An upstream that closes without its end marker failed mid-answer, unless it already sent its usage.
          if (done || read.done) return finish(ctrl, done || usage !== undefined);
          if (out) return;
        }
      },
      cancel: async () => {
        // The client went away: stop the provider, charge the prompt and what was generated until now; the
        // settle releases the rest of the hold.
        disarm();
        clearInterval(keepHold);
        clearTimeout(cap);
        abort.abort();
        if (resolved) return;
        resolved = true;
        this.settleBehind(call, await cost());
        ended();
      },
    });
    // The access-log line waits for the stream's end, when its charge is known.
    call.trace.streamEnd = streamEnded;
    return new Response(body, {
      headers: { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive", ...call.headers },
    });
  }

  /**
   * Usage when the provider reported none: the prompt as the provider counted it (Anthropic's message_start) or
   * as the tokenizer counts it, and the generated text counted by the tokenizer. The gateway's own counts never
   * exceed the reserve's bounds: the provider cannot bill more than those, so a count above them (another
   * vendor's tokenizer, an image counted at a typical size) is the estimate's error. Never throws: should
   * counting fail, the bounds themselves are billed.
   */
  private async estimate(call: Call, generated: string, promptTokens?: number): Promise<Usage> {
    const { promptTokens: promptBound, completionTokens: completionBound } = call.bound;
    try {
      return {
        prompt_tokens: promptTokens ?? Math.min(await countPromptTokens(call.body), promptBound),
        completion_tokens: Math.min(await countTokens(generated), completionBound),
      };
    } catch (e) {
      log.error("token count failed; billing the upper bounds", { model: call.model.id, error: e });
      return { prompt_tokens: promptTokens ?? promptBound, completion_tokens: Math.min(Buffer.byteLength(generated), completionBound) };
    }
  }

  /**
   * Settles without making the client wait for it: the answer is already paid for by the hold, and the settle
   * command is queued on the ledger's Redis connection before the response (or the stream's end) leaves, so a
   * balance read that follows on that connection sees the charge. Saves one Redis round trip of added latency.
   * It retries for about a minute; after that the charge is kept in Postgres for the repair job.
   */
  private settleBehind(call: Call, usage: Usage): void {
    const charge = billedMicro(call.model, usage);
    // Charged all the same (the provider billed it), but the hold should have covered it.
    checkHoldOverrun(charge, call.bound, { model: call.model.id, hold: call.holdId, usage });
    const details: ChargeDetails = {
      promptTokens: usage.prompt_tokens,
      completionTokens: usage.completion_tokens,
      costMicro: costMicro(call.model, usage),
      model: call.model.id,
    };
    const keep: PendingSettle = { holdId: call.holdId, wallet: call.principal.wallet, keyId: call.principal.keyId, charge, details };
    call.trace.chargeUsdc = charge;
    // Each attempt is bounded: while Redis is down the client queues commands instead of failing them. A queued
    // attempt that runs later is harmless: settle-6 posts a hold once.
    const attempt = () => withDeadline(this.ledger.settleOutcome(call.principal, call.holdId, charge, details), SETTLE_ATTEMPT_MS);
    const p: Promise<void> = retry("settle", attempt, { hold: call.holdId, charge }, SETTLE_ATTEMPTS)
      .then(
        (outcome) => {
          if (outcome !== "UNKNOWN_HOLD") return;
          // Redis lost the hold (data loss): the charge is kept for an operator rather than dropped.
          log.error("settle found no hold; charge kept in pending_settles", { hold: call.holdId, charge, wallet: call.principal.wallet });
          return this.pending.record({ ...keep, unresolved: true });
        },
        () => this.pending.record(keep),
      )
      .finally(() => this.settling.delete(p));
    this.settling.set(p, keep);
  }

  /** Waits for settles still in flight: shutdown calls it before the final outbox drain. */
  async idle(): Promise<void> {
    while (this.settling.size > 0 || this.releasing.size > 0) await Promise.all([...this.settling.keys(), ...this.releasing]);
  }

  /** Shutdown ran out of time: the settles still running go to Postgres, posted at the next start (once). */
  async keepInFlight(): Promise<number> {
    const left = [...this.settling.values()];
    await Promise.all(left.map((k) => this.pending.record(k)));
    return left.length;
  }

  private async release(call: Pick<Call, "principal" | "holdId">): Promise<void> {
    // Bounded like a settle attempt: while Redis is down the client queues commands instead of failing them.
    const attempt = () => withDeadline(this.ledger.release(call.principal, call.holdId), SETTLE_ATTEMPT_MS);
    await retry("release", attempt, { hold: call.holdId }, 5).catch(() => {
      // The hold expires by itself through the sweeper; the client's answer must not wait for Redis.
    });
  }
}

// A settle keeps trying for about a minute (a late settle still charges after the sweeper expired the hold), then
// goes to Postgres (pending_settles) for the repair job.
const SETTLE_ATTEMPTS = 35;
const SETTLE_ATTEMPT_MS = 2_000;
// A reserve takes well under a millisecond in Redis; one that has not answered in this long is not coming soon.
const RESERVE_DEADLINE_MS = 2_000;

/** Rejects when `p` takes longer than `ms` (p itself runs on). */
function withDeadline<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms)));
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/** Retries a ledger call (it is idempotent by hold id) with capped backoff; a settle must not be lost to a blip. */
async function retry<T>(what: string, fn: () => Promise<T>, ctx: Record<string, unknown>, attempts = 5): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (e) {
      if (attempt >= attempts) {
        log.error(`ledger ${what} failed after ${attempts} attempts`, { ...ctx, error: e });
        throw e;
      }
      await Bun.sleep(Math.min(2_000, 20 * 2 ** attempt));
    }
  }
}
