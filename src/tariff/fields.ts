import { ApiError } from "../errors.ts";
import { refuseUnboundedParts } from "./parts.ts";

/**
 * Request fields that would make a provider bill us more than the catalog price the wallet pays, or send the
 * request to another model or host than the one the hold was sized for. They are refused for every model (400
 * VALIDATION_ERROR naming the field), before any reserve, so none reaches a provider. docs/design.md "Money rules" lists
 * them; the reason is the message's second half.
 */
export const REFUSED_FIELDS: Readonly<Record<string, string>> = {
  service_tier: "it selects the provider's pricing tier (priority processing costs more)",
  models: "it lets the provider fall back to other models, at their prices",
  route: "it lets the provider fall back to other models, at their prices",
  provider: "it lets the provider route the request to other hosts, at their prices",
  plugins: "provider plugins (web search, file parsing) are billed on top of the tokens",
  web_search_options: "web search is billed per call on top of the tokens",
  audio: "audio output is billed at audio rates",
  modalities: "output other than text (audio, images) is billed at other rates",
  prediction: "rejected predicted-output tokens are billed on top of the completion",
};

// Tool types a provider runs itself (web search, code execution…) are billed per call, beyond the tokens.
const CLIENT_TOOL_TYPES = new Set(["function", "custom"]);

/**
 * Throws 400 VALIDATION_ERROR naming the first field, tool or content part (parts.ts) that could raise the
 * provider's bill behind the hold.
 */
export function refuseRepricingFields(body: Record<string, unknown>): void {
  for (const field in body) {
    // Own entries only: `constructor` or `toString` would otherwise find Object.prototype's.
    if (!Object.hasOwn(REFUSED_FIELDS, field) || body[field] === null || body[field] === undefined) continue;
    const why = REFUSED_FIELDS[field];
    // Text output is what every model gives anyway: modalities ["text"] changes nothing.
    if (field === "modalities" && Array.isArray(body.modalities) && body.modalities.every((m) => m === "text")) continue;
    throw new ApiError({ code: "VALIDATION_ERROR", message: `${field} is not accepted: ${why}` });
  }
  if (Array.isArray(body.tools)) {
    body.tools.forEach((tool: { type?: unknown }, i) => {
      if (!CLIENT_TOOL_TYPES.has(tool?.type as string)) {
        throw new ApiError({
          code: "VALIDATION_ERROR",
          message: `tools[${i}].type "${String(tool?.type).slice(0, 64)}" is not accepted: only function and custom tools, since tools a provider runs itself are billed per call`,
        });
      }
    });
  }
  refuseUnboundedParts(body.messages);
}

/**
 * What an OpenAI-compatible provider receives of the client's request (anything else is dropped, not refused:
 * the spec allows additional properties). The spec's fields, and OpenAI's that cannot raise the bill beyond
 * the hold: the completion cap is always sent (clamped), logprobs and logit_bias shape the answer not its size,
 * `user` / `safety_identifier` / `prompt_cache_key` are hints for abuse tracking and caching (a cache hit only
 * lowers the provider's bill), `verbosity` is bounded by the cap, `functions` / `function_call` are the older
 * form of tools and bounded like them, `top_k` is a sampling knob some providers take, `modalities` passes only
 * as ["text"] (refused otherwise). `store` and `metadata` are left out: storing completions in the operator's
 * provider account is the operator's decision, not a client's.
 */
export const OPENAI_FORWARDED_FIELDS: ReadonlySet<string> = new Set([
  // the spec's
  "model",
  "messages",
  "max_tokens",
  "temperature",
  "top_p",
  "stream",
  "tools",
  "tool_choice",
  "stop",
  "presence_penalty",
  "frequency_penalty",
  "response_format",
  "seed",
  "n",
  "logprobs",
  "thinking",
  "reasoning_effort",
  // OpenAI's, harmless to the bill
  "max_completion_tokens",
  "stream_options",
  "top_logprobs",
  "logit_bias",
  "parallel_tool_calls",
  "user",
  "safety_identifier",
  "prompt_cache_key",
  "verbosity",
  "functions",
  "function_call",
  "modalities",
  "top_k",
]);

/** The fields of `body` that `allowed` names, in their order. */
export function pickFields(body: Record<string, unknown>, allowed: ReadonlySet<string>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k in body) if (allowed.has(k)) out[k] = body[k];
  return out;
}
