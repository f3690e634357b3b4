/**
 * The chat-completions SSE the core streams (its chunks, a usage chunk, possibly a StreamErrorEvent, `[DONE]`) →
 * the Responses API's event stream: response.created, response.in_progress, per output item its added / delta /
 * done events, then response.completed carrying the usage, or response.failed (fixed message) when the provider
 * failed mid-stream. Pull-based: it reads the chat stream only as fast as its client reads, and cancelling it
 * cancels the chat stream (the core then bills the disconnect as for chat).
 */
import type { ChatCompletionChunk, ToolCallDelta } from "../openai/wire.ts";
import { SseDecoder } from "../sse.ts";
import { incompleteReason } from "./answer.ts";
import { type Item, newId, outputText, responsesUsage, type ResponsesUsage } from "./wire.ts";

/** What a client reads when the provider failed after the stream started: no upstream detail. */
export const STREAM_FAILED = "The model provider failed during the stream";

const encoder = new TextEncoder();

type Open = { item: Item; index: number; text: string };

/** Translates one chat stream; `finished` gets the output items of a completed answer (the store keeps them). */
export function responsesStream(
  chat: ReadableStream<Uint8Array>,
  frame: Record<string, unknown>,
  finished: (output: Item[]) => Promise<void>,
): ReadableStream<Uint8Array> {
  const reader = chat.getReader();
  const decoder = new SseDecoder();
  const output: Item[] = [];
  const open: Open[] = [];
  const calls = new Map<number, Open>();
  let message: Open | undefined;
  let seq = 0;
  let out = "";
  let usage: ResponsesUsage | undefined;
  let finish: string | null = null;
  let ended = false;

  const emit = (type: string, fields: Record<string, unknown>) => {
    out += `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...fields })}\n\n`;
  };
  const lifecycle = (type: string, response: Record<string, unknown>) => emit(type, { response: { ...frame, ...response } });

  function close(o: Open): void {
    const { item, index } = o;
    item.status = "completed";
    if (item.type === "message") {
      const part = { type: "output_text", text: o.text, annotations: [], logprobs: [] };
      emit("response.output_text.done", { item_id: item.id, output_index: index, content_index: 0, text: o.text, logprobs: [] });
      emit("response.content_part.done", { item_id: item.id, output_index: index, content_index: 0, part });
      item.content = [part];
    } else {
      emit("response.function_call_arguments.done", { item_id: item.id, output_index: index, arguments: item.arguments });
    }
    emit("response.output_item.done", { output_index: index, item });
    open.splice(open.indexOf(o), 1);
    if (o === message) message = undefined;
  }

  function add(item: Item): Open {
    const o = { item, index: output.length, text: "" };
    output.push(item);
    open.push(o);
    emit("response.output_item.added", { output_index: o.index, item });
    return o;
  }

  function text(delta: string): void {
    if (!message) {
      // Items stream one after another: a call still open ends before a new message starts.
      for (const o of [...open]) close(o);
      message = add({ id: newId("msg"), type: "message", status: "in_progress", role: "assistant", content: [] });
      emit("response.content_part.added", {
        item_id: message.item.id,
        output_index: message.index,
        content_index: 0,
        part: { type: "output_text", text: "", annotations: [], logprobs: [] },
      });
    }
    message.text += delta;
    emit("response.output_text.delta", { item_id: message.item.id, output_index: message.index, content_index: 0, delta, logprobs: [] });
  }

  function toolCall(d: ToolCallDelta): void {
    const at = d.index ?? 0;
    let o = calls.get(at);
    if (!o) {
      for (const x of [...open]) close(x);
      o = add({
        id: newId("fc"),
        type: "function_call",
        status: "in_progress",
        arguments: "",
        call_id: d.id ?? `call_${newId("fc").slice(3)}`,
        name: d.function?.name ?? "",
      });
      calls.set(at, o);
    }
    const args = d.function?.arguments;
    if (args) {
      o.item.arguments += args;
      emit("response.function_call_arguments.delta", { item_id: o.item.id, output_index: o.index, delta: args });
    }
  }

  /** One chat payload: more to come, the end ([DONE]), or a failure (a StreamErrorEvent). */
  function step(payload: string): "more" | "done" | "failed" {
    if (payload === "[DONE]") return "done";
    const chunk = JSON.parse(payload) as ChatCompletionChunk & { error?: unknown };
    if (chunk.error) return "failed";
    if (chunk.usage) usage = responsesUsage(chunk.usage);
    const choice = chunk.choices?.[0];
    if (choice?.delta?.content) text(choice.delta.content);
    for (const d of choice?.delta?.tool_calls ?? []) toolCall(d);
    if (choice?.finish_reason) finish = choice.finish_reason;
    return "more";
  }

  async function end(ctrl: ReadableStreamDefaultController<Uint8Array>, ok: boolean): Promise<void> {
    ended = true;
    for (const o of [...open]) close(o);
    // No usage before [DONE]: the core stopped the stream (its time cap), so the answer is not complete.
    if (ok && usage) {
      const reason = incompleteReason(finish);
      const status = reason ? "incomplete" : "completed";
      lifecycle(`response.${status}`, {
        status,
        incomplete_details: reason ? { reason } : null,
        output,
        output_text: outputText(output),
        usage,
      });
    } else {
      lifecycle("response.failed", { status: "failed", error: { code: "server_error", message: STREAM_FAILED }, output, usage: null });
    }
    ctrl.enqueue(encoder.encode(out));
    out = "";
    if (ok && usage) await finished(output).catch(() => {});
    ctrl.close();
  }

  return new ReadableStream<Uint8Array>({
    start(ctrl) {
      const response = { status: "in_progress", output: [], usage: null };
      lifecycle("response.created", response);
      lifecycle("response.in_progress", response);
      ctrl.enqueue(encoder.encode(out));
      out = "";
    },
    async pull(ctrl) {
      for (;;) {
        if (ended) return;
        let read: Awaited<ReturnType<typeof reader.read>>;
        try {
          read = await reader.read();
        } catch {
          return end(ctrl, false);
        }
        const payloads = read.done ? decoder.end() : decoder.push(read.value);
        for (const payload of payloads) {
          let r: ReturnType<typeof step>;
          try {
            r = step(payload);
          } catch {
            r = "failed";
          }
          if (r !== "more") return end(ctrl, r === "done");
        }
        if (read.done) return end(ctrl, false);
        if (out) {
          ctrl.enqueue(encoder.encode(out));
          out = "";
          return;
        }
      }
    },
    cancel(reason) {
      ended = true;
      return reader.cancel(reason);
    },
  });
}
