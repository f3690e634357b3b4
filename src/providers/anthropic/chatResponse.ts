import type { Usage } from "../types.ts";
import { type AssistantMessage, type ChatCompletion, type ThinkingBlock, type ToolCall, usageBody } from "../openai/wire.ts";
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
 * The prompt of an Anthropic usage object, split as the tariff bills it: input_tokens excludes cached input, so
 * the whole prompt is input + cache writes + cache reads; the reads and the writes (by lifetime, from
 * `cache_creation`; without it, all writes are 5-minute) are billed at their own prices (tariff/charge.ts).
 */
export function promptOf(u: AnthropicUsage): Omit<Usage, "completion_tokens"> {
  const read = count(u.cache_read_input_tokens);
  const created = count(u.cache_creation_input_tokens);
  const byTtl = u.cache_creation && typeof u.cache_creation === "object" ? u.cache_creation : undefined;
  const write1h = byTtl ? Math.min(count(byTtl.ephemeral_1h_input_tokens), created) : 0;
  const out: Omit<Usage, "completion_tokens"> = { prompt_tokens: count(u.input_tokens) + created + read };
  if (read > 0) out.cached_prompt_tokens = read;
  if (created - write1h > 0) out.cache_write_tokens = created - write1h;
  if (write1h > 0) out.cache_write_1h_tokens = write1h;
  return out;
}

/** Usage of a complete answer, or null when the body has none the gateway can bill. */
export function usageOf(u: AnthropicUsage | null | undefined): Usage | null {
  if (!u || typeof u !== "object") return null;
  const o = u;
  if (!Number.isSafeInteger(o.input_tokens) || !Number.isSafeInteger(o.output_tokens)) return null;
  return { ...promptOf(o), completion_tokens: count(o.output_tokens) };
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
  const body: ChatCompletion = {
    id: msg.id,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: modelId,
    choices: [{ index: 0, message, logprobs: null, finish_reason: finishReason(msg.stop_reason) }],
  };
  if (usage) body.usage = usageBody(usage);
  return { json: JSON.stringify(body), usage, generated, answer: body };
}
