import type { ChatCompletion, Usage as ChatUsage } from "../openai/wire.ts";
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
 * Anthropic usage from the chat usage the request was billed at: input_tokens is the whole prompt (cached
 * input included, as billed), so that input + output tokens at the catalog's prices is the charge.
 */
export function messagesUsage(u: Partial<ChatUsage> | null | undefined): MessageAnswer["usage"] {
  const n = (v: unknown) => (Number.isSafeInteger(v) && (v as number) >= 0 ? (v as number) : 0);
  return {
    input_tokens: n(u?.prompt_tokens),
    output_tokens: n(u?.completion_tokens),
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
  };
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
