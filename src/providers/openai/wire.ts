/**
 * OpenAI's chat-completions wire shapes: what clients send the gateway, what OpenAI-compatible providers answer,
 * and what the gateway answers in turn (the Anthropic adapter writes these too). What comes off the wire is not
 * checked by its type: the readers test each field they use, so these types name fields rather than promise them.
 */
import type { Usage as TokenCounts } from "../types.ts";

/** A function tool call of an assistant message. */
export interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/** A piece of a tool call in a stream chunk: the first carries id and name, the rest argument text. */
export interface ToolCallDelta {
  index: number;
  id?: string;
  type?: "function";
  function?: { name?: string; arguments?: string };
}

/**
 * Signed reasoning as LiteLLM carries it (`thinking_blocks`): Anthropic's blocks, which a client sends back so a
 * tool-use conversation can continue with thinking on.
 */
export type ThinkingBlock = { type: "thinking"; thinking: string; signature?: string } | { type: "redacted_thinking"; data?: string };

/** A content part of a client's message; only text and images have a meaning beyond their bytes here. */
export interface ContentPart {
  type: string;
  text?: string;
  image_url?: { url: string; detail?: string };
  /** A prompt-caching breakpoint: passed on to an Anthropic provider only (anthropic/cacheControl.ts). */
  cache_control?: unknown;
}

/** One message of a client's request (role and content checked by the route's schema, the rest not). */
export interface ChatMessage {
  role: string;
  content?: string | ContentPart[] | null;
  name?: string;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
  thinking_blocks?: ThinkingBlock[];
}

/** A function tool definition of a request. */
export interface FunctionTool {
  type: "function";
  function: { name: string; description?: string; parameters?: unknown };
}

/** `tool_choice` naming one function. */
export interface NamedToolChoice {
  type: "function";
  function: { name: string };
}

/** The request an OpenAI-compatible provider receives: the client's allowed fields with the gateway's overrides. */
export type ForwardedRequest = Record<string, unknown> & {
  model: string;
  max_tokens?: number;
  max_completion_tokens?: number;
  stream_options?: { include_usage?: boolean };
};

/**
 * Token usage of an answer; cached prompt tokens under prompt_tokens_details (cache writes as OpenRouter names
 * them), and what the gateway charged for the request (`charge_usdc`, µUSDC) in every usage it answers.
 */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details?: { cached_tokens: number; cache_write_tokens?: number };
  /** DeepSeek's name for the cached part of prompt_tokens. */
  prompt_cache_hit_tokens?: number;
  charge_usdc?: number;
}

/**
 * The assistant's message. DeepSeek names reasoning `reasoning_content`, OpenRouter `reasoning`; `thinking_blocks`
 * is LiteLLM's field for Anthropic's signed thinking.
 */
export interface AssistantMessage {
  role: "assistant";
  content: string | null;
  refusal: string | null;
  tool_calls?: ToolCall[];
  reasoning_content?: string;
  reasoning?: string;
  thinking_blocks?: ThinkingBlock[];
}

/** A non-streaming answer. */
export interface ChatCompletion {
  id?: string;
  object: "chat.completion";
  created: number;
  model: string;
  choices: { index: number; message?: AssistantMessage; logprobs: unknown; finish_reason: string | null }[];
  usage?: Usage;
}

/** What a stream chunk's delta may carry (the fields of AssistantMessage, a piece at a time). */
export interface ChunkDelta {
  role?: "assistant";
  content?: string | null;
  tool_calls?: ToolCallDelta[];
  reasoning_content?: string;
  reasoning?: string;
  thinking_blocks?: ThinkingBlock[];
}

/** One stream chunk; the usage chunk has no choices. */
export interface ChatCompletionChunk {
  id: string;
  object: "chat.completion.chunk";
  created: number;
  model: string;
  choices: { index: number; delta?: ChunkDelta; logprobs: unknown; finish_reason: string | null }[];
  usage?: Usage | null;
}

/** An error a provider sends inside a stream instead of a chunk (OpenRouter, vLLM). */
export interface StreamError {
  error: unknown;
}

/**
 * OpenAI's usage object for a billed usage: the cache reads (and writes, OpenRouter's name) under
 * prompt_tokens_details when there are any, and the charge when it is known.
 */
export function usageBody(u: TokenCounts, charge?: number): Usage {
  const out: Usage = {
    prompt_tokens: u.prompt_tokens,
    completion_tokens: u.completion_tokens,
    total_tokens: u.prompt_tokens + u.completion_tokens,
  };
  const cached = u.cached_prompt_tokens ?? 0;
  const writes = (u.cache_write_tokens ?? 0) + (u.cache_write_1h_tokens ?? 0);
  if (cached > 0 || writes > 0)
    out.prompt_tokens_details = writes > 0 ? { cached_tokens: cached, cache_write_tokens: writes } : { cached_tokens: cached };
  if (charge !== undefined) out.charge_usdc = charge;
  return out;
}
