import { upstreamStatusError } from "../errors.ts";
import { OPENAI_FORWARDED_FIELDS, pickFields } from "../fields.ts";
import { forwardedMessages } from "../parts.ts";
import type { Usage } from "../pricing.ts";
import type { ProviderAdapter, StreamStep, UpstreamParams } from "../types.ts";
import type { AssistantMessage, ChatCompletion, ChatCompletionChunk, ChunkDelta, ForwardedRequest, StreamError, Usage as WireUsage } from "./wire.ts";

const CHAT_PATH = "/chat/completions";
// OpenAI renders tool definitions and a response schema into the prompt in its own form (a few tokens per tool
// and property beyond their JSON, a dozen around them: OpenAI's cookbook count); the JSON's bytes are in the body,
// these allowances cover the rest with room to spare.
const TOOLS_RENDERING_TOKENS = 100;
const SCHEMA_RENDERING_TOKENS = 100;

function usageOf(u: Partial<WireUsage> | null | undefined): Usage | null {
  if (!u || typeof u !== "object") return null;
  const { prompt_tokens, completion_tokens } = u;
  if (!Number.isSafeInteger(prompt_tokens) || !Number.isSafeInteger(completion_tokens)) return null;
  if ((prompt_tokens as number) < 0 || (completion_tokens as number) < 0) return null;
  return { prompt_tokens: prompt_tokens as number, completion_tokens: completion_tokens as number };
}

function generatedText(part: AssistantMessage | ChunkDelta | undefined): string {
  if (!part) return "";
  let s = typeof part.content === "string" ? part.content : "";
  // DeepSeek names the reasoning reasoning_content, OpenRouter reasoning: both are billed output.
  if (typeof part.reasoning_content === "string") s += part.reasoning_content;
  else if (typeof part.reasoning === "string") s += part.reasoning;
  const calls = part.tool_calls;
  if (Array.isArray(calls)) {
    for (const c of calls) {
      if (typeof c.function?.name === "string") s += c.function.name;
      if (typeof c.function?.arguments === "string") s += c.function.arguments;
    }
  }
  return s;
}

/**
 * The upstream JSON text with its model renamed in place, so an answer (or each chunk of a stream) is not
 * serialised again only for its label. Only when `"model"` occurs once in the text, directly followed by the value
 * parsed from it: then it is the top-level field (a `"model"` inside a string is escaped and never matches).
 * Otherwise undefined, and the caller serialises.
 */
export function renamedModel(text: string, from: unknown, to: string): string | undefined {
  if (typeof from !== "string") return undefined;
  const at = text.indexOf('"model"');
  if (at === -1 || text.indexOf('"model"', at + 7) !== -1) return undefined;
  const pair = `"model":${JSON.stringify(from)}`;
  if (!text.startsWith(pair, at)) return undefined;
  return `${text.slice(0, at)}"model":${JSON.stringify(to)}${text.slice(at + pair.length)}`;
}

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
    }
    // The generated text is only counted when usage is missing: skip the walk over the answer otherwise.
    return { json, usage, generated: usage ? "" : obj.choices.map((c) => generatedText(c.message)).join("") };
  },

  // Stateless: every OpenAI chunk stands alone, so one translator serves the whole stream.
  openStream(includeUsage, modelId) {
    return (payload): StreamStep => {
      if (payload === "[DONE]") return { done: true };
      const obj = JSON.parse(payload) as Partial<ChatCompletionChunk & StreamError>;
      if (obj.error) return { failed: true };
      const usage = usageOf(obj.usage) ?? undefined;
      const choices = Array.isArray(obj.choices) ? obj.choices : [];
      let generated = "";
      for (const c of choices) generated += generatedText(c.delta);
      const renamed = "model" in obj && obj.model !== modelId; // every chunk names the model the client asked for
      if (usage && !includeUsage) {
        // The client did not ask for usage: drop the usage-only chunk, strip it from a content chunk.
        if (choices.length === 0) return { usage, generated };
        delete obj.usage;
        if (renamed) obj.model = modelId;
        return { chunk: JSON.stringify(obj), usage, generated };
      }
      if (!renamed) return { chunk: payload, usage, generated };
      return { chunk: renamedModel(payload, obj.model, modelId) ?? JSON.stringify({ ...obj, model: modelId }), usage, generated };
    };
  },

  // OpenAI-compatible providers differ in their error bodies; the status is the one thing they agree on.
  upstreamError: (status) => upstreamStatusError(status),
};
