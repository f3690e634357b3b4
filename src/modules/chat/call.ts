import type { HeldCall } from "../../billing/holds.ts";
import type { ApiError } from "../../errors.ts";
import { log, redactText } from "../../log.ts";
import { metrics } from "../../observe/metrics.ts";
import type { ChatRequest, ProviderAdapter } from "../../providers/types.ts";

/**
 * One request in flight: its hold (who pays, which hold, what it covers), the provider's adapter, the client's
 * request, and the headers its answer carries.
 */
export interface Call extends HeldCall {
  adapter: ProviderAdapter;
  /** The client's request, counted with the tokenizer when the provider reports no usage. */
  body: ChatRequest;
  headers: Record<string, string>;
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
