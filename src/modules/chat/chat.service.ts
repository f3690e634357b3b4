import type { ApiKeyAuth } from "../../auth/apiKeys.ts";
import { boundedRequest, dearestBound, embeddingsBound, refuseOverlongPrompt } from "../../tariff/index.ts";
import type { Holds } from "../../billing/holds.ts";
import { ApiError } from "../../errors.ts";
import { newTrace, type RequestTrace } from "../../observe/trace.ts";
import type { Catalog, Model } from "../../providers/catalog.ts";
import type { ChatRequest, DoorStream, ProviderAdapter } from "../../providers/types.ts";
import type { KeyPrincipal } from "../../ledger/ledger.ts";
import { modelAllowed } from "../../auth/keyLimits.ts";
import { admit, admitModel, type Admitted } from "./admit.ts";
import { checkEmbeddingsRequest, countedInputs, embeddingsAdapter, embeddingsUpstream } from "../../providers/openai/embeddings.ts";

// Hold ids: a random prefix drawn once per process, then a counter (no crypto call per request, issue 31). The
// prefix's 96 random bits keep ids of every process and restart apart, as the UUIDs did; an id names a hold in
// Redis and its charge in Postgres (`charge:<id>`), so it must never repeat.
const HOLD_PREFIX = `h${Buffer.from(crypto.getRandomValues(new Uint8Array(12))).toString("hex")}.`;
let holdCount = 0;
const nextHoldId = () => HOLD_PREFIX + (++holdCount).toString(36);
import type { Attempt, Forwarder } from "./forward.ts";

/**
 * How a front door that speaks another API (the Responses API, the Messages API) reshapes the chat-completions
 * answer the core produced: the core bills it either way (the chat answer's usage, the metered chat stream), the
 * door only rewrites what the client reads. Its request reaches `complete` already as a chat-completions request.
 */
export interface AnswerShape {
  /**
   * The JSON answer, from the chat-completions JSON (text); `answer` is that JSON already parsed when the adapter
   * had it (ParsedCompletion.answer), to read instead of parsing `chat` again.
   */
  json(chat: string, answer?: object): string;
  /**
   * The SSE answer: a translator of the chat-completions stream (which carries a usage chunk: a door asks for
   * include_usage), one per stream, run inside the metered stream (providers/types.ts DoorStream).
   */
  stream(): DoorStream;
  /**
   * For a model whose provider speaks the door's own API: the dialect that sends the client's request to it in
   * that format and passes its answer back (reading the usage to bill), so nothing is translated twice. The
   * chat-shaped request still decides admission and the hold; the answer then needs no reshaping.
   */
  native?(model: Model): ProviderAdapter | undefined;
}

/**
 * A paid call's payment (PAYMENT-SIGNATURE / X-PAYMENT on a model request), run once the request is admitted and its
 * hold is known and before the reserve: it credits the key's wallet, or throws (nothing is held then).
 */
export type PayHook = (principal: KeyPrincipal, required: number) => Promise<void>;

/**
 * Who pays for a call made without an API key (keyless x402, SIWx: paycall/keyless.ts), decided once the request is
 * admitted (fields, model, prompt) and its hold known: the principal to hold and charge under, or a throw (a 402 with
 * the terms for `required`, a 401), nothing held then.
 */
export type Payer = (required: number) => Promise<{ principal: KeyPrincipal; holdId?: string }>;

/**
 * POST /v1/chat/completions (and every front door through it), top to bottom: admit (key, model, fields), bound (the upstream request and the hold
 * that covers it), reserve (the first Redis call), forward (the provider, under its deadline), settle the usage or
 * release the hold (the second and last Redis call, behind the answer).
 */
export class ChatService {
  constructor(
    private readonly auth: ApiKeyAuth,
    private readonly catalog: Catalog,
    private readonly holds: Holds,
    private readonly forwarder: Forwarder,
  ) {}

  async complete(
    authorization: string | null,
    body: ChatRequest,
    trace: RequestTrace = newTrace(),
    shape?: AnswerShape,
    pay?: PayHook,
    payer?: Payer,
  ): Promise<Response> {
    const admitted = await admit(this.auth, this.catalog, payer ? undefined : authorization, body, trace);
    const stream = body.stream === true;
    const attempt = (m: Model): Attempt => {
      const native = shape?.native?.(m);
      const { adapter, url, init, bound } = boundedRequest(m, body, stream, native);
      return {
        model: m,
        adapter,
        url,
        init,
        bound,
        includeUsage: !native && body.stream_options?.include_usage === true,
        reshape: shape && !native ? shape.json : undefined,
        door: shape && !native ? () => shape.stream() : undefined,
      };
    };
    // A fallback whose context cannot fit the prompt is skipped (the asked model's was checked at admission, with its 400).
    const attempts = this.chain(admitted, attempt, (m) => fits(m, body));
    return this.serve(admitted, attempts, body, stream, trace, pay, payer);
  }

  /**
   * POST /v1/embeddings, on the same path as a chat request: admitted (key, an embedding model, the key's list),
   * held at the inputs' bound, forwarded (with failover), charged the provider's prompt tokens at the prompt price.
   */
  async embed(
    authorization: string | null,
    raw: unknown,
    trace: RequestTrace = newTrace(),
    pay?: PayHook,
    payer?: Payer,
  ): Promise<Response> {
    const req = checkEmbeddingsRequest(raw);
    const admitted = await admitModel(this.auth, this.catalog, payer ? undefined : authorization, req.model, "embedding", trace);
    const attempt = (m: Model): Attempt => ({
      model: m,
      adapter: embeddingsAdapter,
      ...embeddingsUpstream(m, req),
      bound: embeddingsBound(m, req.inputs),
      includeUsage: false,
    });
    return this.serve(admitted, this.chain(admitted, attempt), countedInputs(req), false, trace, pay, payer);
  }

  /**
   * What every model endpoint shares once its request is admitted and shaped: one hold covering whichever model of
   * the chain serves (the dearest bound; each is charged at its own prices), the payment or payer of a paid call,
   * the reserve, then the forwarder (provider, failover, settle or release).
   */
  private async serve(
    admitted: Admitted,
    attempts: Attempt[],
    body: ChatRequest,
    stream: boolean,
    trace: RequestTrace,
    pay?: PayHook,
    payer?: Payer,
  ): Promise<Response> {
    const model = admitted.model;
    const bound = dearestBound(attempts.map((a) => a.bound));
    // A keyless call's payer may name the hold id (an `upto` authorization's row names it, for its repair).
    const paid = admitted.principal ? { principal: admitted.principal } : await payer!(bound.micro);
    const principal = paid.principal;
    trace.keyId = principal.keyId;
    trace.wallet = principal.wallet;
    if (pay !== undefined) await pay(principal, bound.micro);
    const holdId = paid.holdId ?? nextHoldId();
    const { rateRemaining, lease } = await this.reserve(principal, holdId, bound.micro);
    trace.provider = model.provider.name;
    trace.stream = stream;

    const headers: Record<string, string> = { "x-ratelimit-remaining": String(rateRemaining) };
    const call = { principal, holdId, model, asked: body.model, adapter: attempts[0]!.adapter, body, bound, headers, trace, lease };
    return stream ? await this.forwarder.streamed(call, attempts) : await this.forwarder.single(call, attempts);
  }

  /**
   * The models a request may be served by, in order: the one asked for, then its catalog `fallbacks` that the key
   * may call (and that `usable` accepts); each with its upstream request shaped and bounded.
   */
  private chain(admitted: Admitted, attempt: (m: Model) => Attempt, usable: (m: Model) => boolean = () => true): Attempt[] {
    const attempts = [attempt(admitted.model)];
    for (const f of admitted.model.fallbacks ?? []) {
      if (modelAllowed(admitted.principal?.limits, f.id) && usable(f)) attempts.push(attempt(f));
    }
    return attempts;
  }

  /** The reserve; a key refused because Redis lost its state (not a revoke) is restored from Postgres and tried once more. */
  private async reserve(principal: KeyPrincipal, holdId: string, micro: number): ReturnType<Holds["reserve"]> {
    try {
      return await this.holds.reserve(principal, holdId, micro);
    } catch (e) {
      if (!(e instanceof ApiError && e.code === "UNAUTHORIZED") || !(await this.auth.restoreLostState(principal))) throw e;
      return this.holds.reserve(principal, holdId, micro);
    }
  }

  /** Waits for settles still in flight: shutdown calls it before the final outbox drain. */
  idle(): Promise<void> {
    return this.holds.idle();
  }

  /** Shutdown ran out of time: the settles still running go to Postgres, posted at the next start (once). */
  keepInFlight(): Promise<number> {
    return this.holds.keepInFlight();
  }
}

/** Whether a fallback's context fits the prompt (the asked model's was checked at admission, with its 400). */
function fits(model: Model, body: ChatRequest): boolean {
  try {
    refuseOverlongPrompt(model, body);
    return true;
  } catch {
    return false;
  }
}
