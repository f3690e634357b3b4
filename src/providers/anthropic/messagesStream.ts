import type { ChatCompletionChunk, ChunkDelta, Usage as ChatUsage } from "../openai/wire.ts";
import type { DoorStream } from "../types.ts";
import { messageId, messagesUsage, stopReason } from "./messagesAnswer.ts";

const event = (type: string, data: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
// The frequent events as text, as `event` would write them (test/messages.wire.unit.test.ts holds them to it).
const TEXT_BLOCK = '{"type":"text","text":""}';
const blockStart = (index: number, block: string) =>
  `event: content_block_start\ndata: {"type":"content_block_start","index":${index},"content_block":${block}}\n\n`;
const blockStop = (index: number) => `event: content_block_stop\ndata: {"type":"content_block_stop","index":${index}}\n\n`;
const textDelta = (index: number, text: string) =>
  `event: content_block_delta\ndata: {"type":"content_block_delta","index":${index},"delta":{"type":"text_delta","text":${JSON.stringify(text)}}}\n\n`;
const MESSAGE_STOP = 'event: message_stop\ndata: {"type":"message_stop"}\n\n';
/** messagesUsage's JSON (its four counts, and the charge when known, are always whole numbers). */
const usageJson = (u: ReturnType<typeof messagesUsage>) =>
  `{"input_tokens":${u.input_tokens},"output_tokens":${u.output_tokens},"cache_creation_input_tokens":${u.cache_creation_input_tokens},"cache_read_input_tokens":${u.cache_read_input_tokens}` +
  (u.charge_usdc === undefined ? "}" : `,"charge_usdc":${u.charge_usdc}}`);
const NO_USAGE = usageJson(messagesUsage(null));

/** What a client reads when the provider fails mid-stream: a fixed message, never the provider's detail. */
export const STREAM_FAILED = { type: "api_error", message: "The model provider failed during the stream" };

type Open = { kind: "text" | "thinking" | "tool_use"; index: number } | undefined;

/**
 * Chat SSE payloads → Messages API events, for one stream: message_start at the first chunk; a content block per
 * run of text, reasoning (thinking_delta, then its signature_delta) or tool call (tool_use, input_json_delta),
 * each stopped before the next starts; at [DONE] message_delta with the stop_reason and the billed usage (the chat
 * usage chunk, which the door asked for) and message_stop. The chat stream's error event → an `error` event.
 */
export function messagesEvents(model: string): (payload: string | object) => string {
  let started = false;
  let ended = false;
  let open: Open;
  let next = 0;
  let finish: string | null = null;
  let usage: Partial<ChatUsage> | null | undefined;
  const toolBlocks = new Map<number, number>();

  const modelJson = JSON.stringify(model);
  const start = (id: unknown) => {
    if (started) return "";
    started = true;
    return (
      `event: message_start\ndata: {"type":"message_start","message":{"id":${JSON.stringify(messageId(id))},"type":"message","role":"assistant",` +
      `"model":${modelJson},"content":[],"stop_reason":null,"stop_sequence":null,"usage":${NO_USAGE}}}\n\n`
    );
  };
  const stop = () => {
    if (!open) return "";
    const out = blockStop(open.index);
    open = undefined;
    return out;
  };
  const begin = (kind: NonNullable<Open>["kind"], block: Record<string, unknown>) => {
    const out = stop();
    open = { kind, index: next++ };
    return out + event("content_block_start", { index: open.index, content_block: block });
  };
  const blockOf = (kind: NonNullable<Open>["kind"], block: Record<string, unknown>) => (open?.kind === kind ? "" : begin(kind, block));

  const text = (t: string) => {
    let out = "";
    if (open?.kind !== "text") {
      out = stop();
      open = { kind: "text", index: next++ };
      out += blockStart(open.index, TEXT_BLOCK);
    }
    return out + textDelta(open.index, t);
  };

  const delta = (d: ChunkDelta): string => {
    let out = "";
    const reasoning = d.reasoning_content ?? d.reasoning;
    if (typeof reasoning === "string" && reasoning.length > 0) {
      out += blockOf("thinking", { type: "thinking", thinking: "", signature: "" });
      out += event("content_block_delta", { index: open!.index, delta: { type: "thinking_delta", thinking: reasoning } });
    }
    for (const b of d.thinking_blocks ?? []) {
      if (b.type === "thinking" && b.signature) {
        out += blockOf("thinking", { type: "thinking", thinking: "", signature: "" });
        out += event("content_block_delta", { index: open!.index, delta: { type: "signature_delta", signature: b.signature } });
      } else if (b.type === "redacted_thinking") {
        out += begin("thinking", { type: "redacted_thinking", data: b.data ?? "" }) + stop();
      }
    }
    if (typeof d.content === "string" && d.content.length > 0) out += text(d.content);
    for (const call of d.tool_calls ?? []) {
      if (typeof call.id === "string" && !toolBlocks.has(call.index)) {
        out += begin("tool_use", { type: "tool_use", id: call.id, name: call.function?.name ?? "", input: {} });
        toolBlocks.set(call.index, open!.index);
      }
      const index = toolBlocks.get(call.index);
      const args = call.function?.arguments;
      if (index !== undefined && typeof args === "string" && args.length > 0) {
        out += event("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: args } });
      }
    }
    return out;
  };

  return (payload) => {
    if (ended) return "";
    if (payload === "[DONE]") {
      ended = true;
      const out = start(undefined) + stop();
      const delta = `{"stop_reason":${JSON.stringify(stopReason(finish ?? "stop"))},"stop_sequence":null}`;
      const last = `event: message_delta\ndata: {"type":"message_delta","delta":${delta},"usage":${usageJson(messagesUsage(usage))}}\n\n`;
      return out + last + MESSAGE_STOP;
    }
    let chunk: ChatCompletionChunk & { error?: unknown };
    try {
      chunk = (typeof payload === "string" ? JSON.parse(payload) : payload) as typeof chunk;
    } catch {
      // A provider's garbled chunk, which chat passes on as text (docs/design.md, What each failure answers): nothing a Messages client can read.
      return "";
    }
    if (chunk?.error !== undefined) {
      ended = true;
      return event("error", { error: STREAM_FAILED });
    }
    let out = start(chunk.id);
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices?.[0];
    if (choice?.delta) out += delta(choice.delta);
    if (choice?.finish_reason) {
      finish = choice.finish_reason;
      out += stop();
    }
    return out;
  };
}

/**
 * The door's stream: the chat SSE payloads translated as the core's metered stream reads them (so a client that
 * stops reading stops the reads, and one that leaves is billed by the core as for chat).
 */
export function messagesStream(model: string): DoorStream {
  const translate = messagesEvents(model);
  let failed = false;
  return {
    open: () => "",
    next(payload) {
      if (failed) return "";
      try {
        return translate(payload);
      } catch {
        // Nothing a Messages client can read: the stream ends as a provider failure does.
        failed = true;
        return event("error", { error: STREAM_FAILED });
      }
    },
  };
}
