import type { ApiError } from "../../errors.ts";
import type { KeyPrincipal } from "../../ledger/ledger.ts";
import { log, redactText } from "../../log.ts";
import { metrics } from "../../observe/metrics.ts";
import type { RequestTrace } from "../../observe/trace.ts";
import type { Model } from "../../providers/catalog.ts";
import type { Usage } from "../../providers/pricing.ts";
import type { ReserveBound } from "../../providers/reserve.ts";
import { countPromptTokens, countTokens } from "../../providers/tokens.ts";
import type { ChatRequest, ProviderAdapter } from "../../providers/types.ts";

/** One request in flight: who pays, which hold, what the prompt is known to cost at most. */
export interface Call {
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

/**
 * The error for a non-2xx upstream answer. The status decides it; the body is read (to classify it) but never
 * passed on. The operator sees it: logged truncated and redacted, counted by provider and status.
 */
export async function upstreamFailure(call: Call, res: Response): Promise<ApiError> {
  const detail = await res.text().catch(() => "");
  upstreamFailed(call, String(res.status), { upstream_status: res.status, body: redactText(detail.slice(0, 500)) });
  return call.adapter.upstreamError(res.status, detail);
}

/** Counts and logs (warn) a provider failure: an HTTP status, or timeout, network, bad_body, stream_broken. */
export function upstreamFailed(call: Call, status: string, fields: Record<string, unknown> = {}): void {
  const provider = call.model.provider.name;
  metrics.upstreamErrors.inc({ provider, status });
  log.warn("upstream failure", { request_id: call.trace.id, provider, model: call.model.id, status, ...fields });
}

/** OpenAI's usage object for a billed usage. */
export function usageBody(u: Usage) {
  return { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens, total_tokens: u.prompt_tokens + u.completion_tokens };
}

/**
 * Usage when the provider reported none: the prompt as the provider counted it (Anthropic's message_start) or
 * as the tokenizer counts it, and the generated text counted by the tokenizer. The gateway's own counts never
 * exceed the reserve's bounds: the provider cannot bill more than those, so a count above them (another
 * vendor's tokenizer, an image counted at a typical size) is the estimate's error. Never throws: should
 * counting fail, the bounds themselves are billed.
 */
export async function estimateUsage(call: Call, generated: string, promptTokens?: number): Promise<Usage> {
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
