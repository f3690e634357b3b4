import { type ChatCompletion, type Usage as ChatUsage, usageBody } from "../openai/wire.ts";
import type { Usage } from "../types.ts";
import type { MessageAnswer } from "./wire.ts";

// OpenAI finish reasons → Anthropic's stop reasons (the inverse of chatResponse.ts's FINISH). A stop sequence
// reads as "stop" in chat, so it comes back as end_turn.
const STOP: Record<string, string> = {
  stop: "end_turn",
  length: "max_tokens",
  tool_calls: "tool_use",
  function_call: "tool_use",
  content_filter: "refusal",
};

/** Anthropic stop_reason for a chat finish_reason; null while the answer has none (a stream still running). */
export function stopReason(finish: unknown): string | null {
  if (finish === null || finish === undefined) return null;
  return (typeof finish === "string" && Object.hasOwn(STOP, finish) && STOP[finish]) || "end_turn";
}

/**
 * Anthropic usage from the chat usage the request was billed at, in Anthropic's terms: input_tokens excludes the
 * cache reads (cache_read_input_tokens, chat's prompt_tokens_details.cached_tokens) and writes
 * (cache_creation_input_tokens, its cache_write_tokens); charge_usdc is what the request was charged.
 */
export function messagesUsage(u: Partial<ChatUsage> | null | undefined): MessageAnswer["usage"] {
  const n = (v: unknown) => (Number.isSafeInteger(v) && (v as number) >= 0 ? (v as number) : 0);
  const prompt = n(u?.prompt_tokens);
  const read = Math.min(n(u?.prompt_tokens_details?.cached_tokens), prompt);
  const write = Math.min(n(u?.prompt_tokens_details?.cache_write_tokens), prompt - read);
  const out: MessageAnswer["usage"] = {
    input_tokens: prompt - read - write,
    output_tokens: n(u?.completion_tokens),
    cache_creation_input_tokens: write,
    cache_read_input_tokens: read,
  };
  if (Number.isSafeInteger(u?.charge_usdc)) out.charge_usdc = u!.charge_usdc;
  return out;
}

/** messagesUsage of a usage as the gateway bills it (a counted one: the provider reported none). */
export function messagesUsageOf(u: Usage): MessageAnswer["usage"] {
  return messagesUsage(usageBody(u));
}

/** A message id: Anthropic's own (msg_…) kept, any other id prefixed. */
export function messageId(id: unknown): string {
  const s = typeof id === "string" && id.length > 0 ? id : crypto.randomUUID();
  return s.startsWith("msg_") ? s : `msg_${s}`;
}

// Tool arguments a model wrote that are not a JSON object still reach the client, under one key.
function toolInput(args: unknown): Record<string, unknown> {
  try {
    const v = JSON.parse(typeof args === "string" && args.trim() !== "" ? args : "{}") as unknown;
    if (typeof v === "object" && v !== null && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    // below
  }
  return { arguments: args };
}

/**
 * A chat completion (JSON text, as the core answered and billed it) → a Messages API answer: thinking first
 * (signed thinking_blocks, else reasoning text as an unsigned thinking block), then the text, then tool calls as
 * tool_use blocks; finish_reason → stop_reason; the billed usage as input/output tokens. `parsed`: that JSON as an
 * object, when the adapter had it.
 */
export function messageOf(chatJson: string, parsed?: object): string {
  const chat = (parsed ?? JSON.parse(chatJson)) as ChatCompletion;
  const choice = chat.choices?.[0];
  const m = choice?.message;
  const content: Record<string, unknown>[] = [];
  if (m?.thinking_blocks?.length) {
    for (const b of m.thinking_blocks)
      content.push(
        b.type === "thinking"
          ? { type: "thinking", thinking: b.thinking, signature: b.signature ?? "" }
          : { type: "redacted_thinking", data: b.data ?? "" },
      );
  } else {
    const reasoning = m?.reasoning_content ?? m?.reasoning;
    if (typeof reasoning === "string" && reasoning.length > 0) content.push({ type: "thinking", thinking: reasoning, signature: "" });
  }
  if (typeof m?.content === "string" && m.content.length > 0) content.push({ type: "text", text: m.content });
  for (const c of m?.tool_calls ?? [])
    content.push({ type: "tool_use", id: c.id, name: c.function?.name, input: toolInput(c.function?.arguments) });
  const answer: MessageAnswer = {
    id: messageId(chat.id),
    type: "message",
    role: "assistant",
    model: chat.model,
    content,
    stop_reason: stopReason(choice?.finish_reason ?? "stop"),
    stop_sequence: null,
    usage: messagesUsage(chat.usage),
  };
  return JSON.stringify(answer);
}
