import type { Usage } from "../types.ts";
import type { AssistantMessage, ChatCompletion, ThinkingBlock, ToolCall, Usage as OpenAIUsage } from "../openai/wire.ts";
import type { ParsedCompletion } from "../types.ts";
import type { Message, Usage as AnthropicUsage } from "./wire.ts";

// Anthropic's stop reasons → OpenAI's finish reasons. pause_turn (a server tool paused a long turn) is an
// ordinary stop for a client that cannot resume it; a context-window stop is a length stop.
const FINISH: Record<string, string> = {
  end_turn: "stop",
  stop_sequence: "stop",
  pause_turn: "stop",
  max_tokens: "length",
  model_context_window_exceeded: "length",
  tool_use: "tool_calls",
  refusal: "content_filter",
};

/** OpenAI finish_reason for an Anthropic stop_reason; anything new reads as a plain stop. */
export function finishReason(stop: unknown): string {
  return (typeof stop === "string" && FINISH[stop]) || "stop";
}

function count(v: unknown): number {
  return Number.isSafeInteger(v) && (v as number) >= 0 ? (v as number) : 0;
}

/**
 * Prompt tokens of an Anthropic usage object: input_tokens excludes cached input, so cache writes and reads are
 * added back. All are billed at the prompt price: the gateway sends no cache_control, so they are rare, and
 * charging them in full never bills less than the provider's cost.
 */
export function promptTokensOf(u: AnthropicUsage): number {
  return count(u.input_tokens) + count(u.cache_creation_input_tokens) + count(u.cache_read_input_tokens);
}

/** Usage of a complete answer, or null when the body has none the gateway can bill. */
export function usageOf(u: AnthropicUsage | null | undefined): Usage | null {
  if (!u || typeof u !== "object") return null;
  const o = u;
  if (!Number.isSafeInteger(o.input_tokens) || !Number.isSafeInteger(o.output_tokens)) return null;
  return { prompt_tokens: promptTokensOf(o), completion_tokens: count(o.output_tokens) };
}

/** OpenAI's usage object, as clients read it (cached prompt tokens under prompt_tokens_details). */
export function openaiUsage(usage: Usage, cachedTokens = 0): OpenAIUsage {
  const out: OpenAIUsage = {
    prompt_tokens: usage.prompt_tokens,
    completion_tokens: usage.completion_tokens,
    total_tokens: usage.prompt_tokens + usage.completion_tokens,
  };
  if (cachedTokens > 0) out.prompt_tokens_details = { cached_tokens: cachedTokens };
  return out;
}

/**
 * A Messages API answer → an OpenAI chat completion. Text blocks join into `content` (null when the answer is
 * only tool calls, as OpenAI sends it); thinking goes to `reasoning_content` and, with its signature, to
 * `thinking_blocks`, which a client sends back so a tool-use conversation can continue with thinking on.
 */
export function parseMessage(text: string, modelId: string): ParsedCompletion {
  const msg = JSON.parse(text) as Message;
  if (msg?.type !== "message" || !Array.isArray(msg.content)) throw new Error("upstream body is not a message");
  let content = "";
  let reasoning = "";
  let generated = "";
  const toolCalls: ToolCall[] = [];
  const thinkingBlocks: ThinkingBlock[] = [];
  for (const b of msg.content) {
    if (b.type === "text" && typeof b.text === "string") {
      content += b.text;
      generated += b.text;
    } else if (b.type === "thinking" && typeof b.thinking === "string") {
      reasoning += b.thinking;
      generated += b.thinking;
      thinkingBlocks.push({ type: "thinking", thinking: b.thinking, signature: b.signature });
    } else if (b.type === "redacted_thinking") {
      thinkingBlocks.push({ type: "redacted_thinking", data: b.data });
    } else if (b.type === "tool_use") {
      const args = JSON.stringify(b.input ?? {});
      toolCalls.push({ id: b.id, type: "function", function: { name: b.name, arguments: args } });
      generated += String(b.name) + args;
    }
    // server tool blocks (web search and the like) have no OpenAI counterpart; their cost is in the usage
  }
  const message: AssistantMessage = {
    role: "assistant",
    content: content.length > 0 || toolCalls.length === 0 ? content : null,
    refusal: null,
  };
  if (toolCalls.length > 0) message.tool_calls = toolCalls;
  if (reasoning.length > 0) message.reasoning_content = reasoning;
  if (thinkingBlocks.length > 0) message.thinking_blocks = thinkingBlocks;

  const usage = usageOf(msg.usage);
  const cached = count(msg.usage?.cache_read_input_tokens);
  const body: ChatCompletion = {
    id: msg.id,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: modelId,
    choices: [{ index: 0, message, logprobs: null, finish_reason: finishReason(msg.stop_reason) }],
  };
  if (usage) body.usage = openaiUsage(usage, cached);
  return { json: JSON.stringify(body), usage, generated, answer: body };
}
