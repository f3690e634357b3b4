import { upstreamStatusError } from "../errors.ts";
import { OPENAI_FORWARDED_FIELDS, pickFields } from "../../tariff/fields.ts";
import { forwardedMessages } from "../../tariff/parts.ts";
import type { ProviderAdapter, UpstreamParams } from "../types.ts";
import { generatedText, openOpenaiStream, renamedModel, usageOf } from "./stream.ts";
import type { ChatCompletion, ForwardedRequest } from "./wire.ts";

const CHAT_PATH = "/chat/completions";
// OpenAI renders tool definitions and a response schema into the prompt in its own form (a few tokens per tool
// and property beyond their JSON, a dozen around them: OpenAI's cookbook count); the JSON's bytes are in the body,
// these allowances cover the rest with room to spare.
const TOOLS_RENDERING_TOKENS = 100;
const SCHEMA_RENDERING_TOKENS = 100;

/**
 * OpenAI chat completions and every provider that speaks it (OpenRouter, Groq, DeepSeek, …): the request's
 * allowed fields (fields.ts) are passed through with the upstream model name, the clamped max_tokens and, for
 * streams, include_usage; its messages are rebuilt from allow-lists of keys and part types (parts.ts).
 */
export const openaiAdapter: ProviderAdapter = {
  request({ model, body, stream, maxTokens }: UpstreamParams) {
    const upstream: ForwardedRequest = { ...pickFields(body, OPENAI_FORWARDED_FIELDS), model: model.upstreamModel };
    // Parts and messages carry billing switches of their own (cache_control): rebuilt, never copied.
    upstream.messages = forwardedMessages(body.messages);
    // The cap always goes upstream, clamped, under the name the client used: reasoning models refuse max_tokens,
    // and a provider that prefers max_completion_tokens must not see a larger one than the hold covers.
    if (body.max_completion_tokens !== undefined) upstream.max_completion_tokens = maxTokens;
    if (body.max_completion_tokens === undefined || body.max_tokens !== undefined) upstream.max_tokens = maxTokens;
    if (stream) upstream.stream_options = { ...(body.stream_options ?? {}), include_usage: true };
    const tools = (Array.isArray(body.tools) && body.tools.length > 0) || (Array.isArray(body.functions) && body.functions.length > 0);
    const schema = body.response_format !== undefined && body.response_format !== null;
    return {
      hiddenPromptTokens: (tools ? TOOLS_RENDERING_TOKENS : 0) + (schema ? SCHEMA_RENDERING_TOKENS : 0),
      // Only a model with a cache-write price in the catalog holds more for it (tariff/charge.ts holdPromptPico).
      cachesUnasked: true,
      url: model.provider.baseUrl + CHAT_PATH,
      init: {
        method: "POST",
        // A keyless provider (a local server) gets no Authorization header at all.
        headers: model.provider.apiKey
          ? { "content-type": "application/json", authorization: `Bearer ${model.provider.apiKey}` }
          : ({ "content-type": "application/json" } as Record<string, string>),
        body: JSON.stringify(upstream),
      },
    };
  },

  parse(text, modelId) {
    const obj = JSON.parse(text) as Partial<ChatCompletion>;
    if (!obj || !Array.isArray(obj.choices)) throw new Error("upstream body has no choices");
    const usage = usageOf(obj.usage);
    // The answer names the model the client asked for; the body is passed on untouched when it already does.
    let json = text;
    if (obj.model !== modelId) {
      json = renamedModel(text, obj.model, modelId) ?? JSON.stringify({ ...obj, model: modelId });
      obj.model = modelId;
    }
    // The generated text is only counted when usage is missing: skip the walk over the answer otherwise.
    return { json, usage, generated: usage ? "" : obj.choices.map((c) => generatedText(c.message)).join(""), answer: obj };
  },

  openStream: openOpenaiStream,

  // OpenAI-compatible providers differ in their error bodies; the status is the one thing they agree on.
  upstreamError: (status) => upstreamStatusError(status),
};
