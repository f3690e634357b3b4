import type { HeldCall } from "../../billing/holds.ts";
import { ApiError } from "../../errors.ts";
import { log, redactText } from "../../log.ts";
import { metrics } from "../../observe/metrics.ts";
import type { ChatRequest, ProviderAdapter } from "../../providers/types.ts";

/**
 * One request in flight: its hold (who pays, which hold, what it covers), the provider's adapter, the client's
 * request, and the headers its answer carries.
 */
export interface Call extends HeldCall {
  /**
   * The model name the client asked for (a catalog id or one of its aliases): the answer names it, whichever model
   * of its failover chain served
   * (`model`, `adapter` and `bound` are the serving one's once it answers; X-Served-Model names it).
   */
  asked: string;
  adapter: ProviderAdapter;
  /** The client's request, counted with the tokenizer when the provider reports no usage. */
  body: ChatRequest;
  headers: Record<string, string>;
}

/**
 * The error for a non-2xx upstream answer. The status decides it; the body is read (to classify it) but never
 * passed on (`body`, when the caller read it already). The operator sees it: logged truncated and redacted, counted
 * by provider and status.
 */
export async function upstreamFailure(call: Call, res: Response, body?: string): Promise<ApiError> {
  const detail = body ?? (await res.text().catch(() => ""));
  // A provider may echo the key it was sent ("Incorrect API key provided: …"): that exact key is masked first,
  // whatever its format, before the body is cut (a cut could leave part of it to no pattern).
  const key = call.model.provider.apiKey;
  const shown = key && detail.includes(key) ? detail.replaceAll(key, "[redacted]") : detail;
  upstreamFailed(call, String(res.status), { upstream_status: res.status, body: redactText(shown.slice(0, 500)) });
  const error = call.adapter.upstreamError(res.status, detail);
  return error.code === "UPSTREAM_ERROR" ? providerFailed(call) : error;
}

/**
 * The 502 of a provider that failed to answer. Its message names the provider by our own catalog's name (so a
 * client knows which server is down: `ollama`), never anything the provider said: the spec's messages are fixed.
 */
export function providerFailed(call: Call): ApiError {
  return new ApiError({ code: "UPSTREAM_ERROR", message: `The model provider "${call.model.provider.name}" failed to answer` });
}

/** Counts and logs (warn) a provider failure: an HTTP status, or timeout, network, bad_body, stream_broken. */
export function upstreamFailed(call: Call, status: string, fields: Record<string, unknown> = {}): void {
  const provider = call.model.provider.name;
  metrics.upstreamErrors.inc({ provider, status });
  log.warn("upstream failure", { request_id: call.trace.id, provider, model: call.model.id, status, ...fields });
}
