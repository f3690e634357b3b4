import type { ChatCompletionChunk, ChunkDelta, ToolCallDelta } from "../openai/wire.ts";
import type { Usage } from "../types.ts";
import type { StreamStep, StreamTranslator } from "../types.ts";
import { usageBody } from "../openai/wire.ts";
import { finishReason, promptOf } from "./chatResponse.ts";
import type { Message, StreamEvent, Usage as AnthropicUsage } from "./wire.ts";

/**
 * Anthropic's stream events → OpenAI chunks, for one stream:
 *   message_start → the role chunk (and the prompt tokens, exact from here on)
 *   content_block_start tool_use → a tool call with id and name; redacted_thinking → a thinking_blocks delta
 *   content_block_delta text_delta → content · input_json_delta → tool-call arguments ·
 *     thinking_delta → reasoning_content · signature_delta → thinking_blocks (the signature to send back)
 *   message_delta → the finish_reason chunk; its cumulative output_tokens is the final usage
 *   message_stop → the usage chunk when the client asked for it, then the end
 *   error → a failed stream; ping, content_block_stop and event types added later carry nothing to forward.
 */
export function openAnthropicStream(includeUsage: boolean, model: string, door = false): StreamTranslator {
  let id = "";
  const created = Math.floor(Date.now() / 1000);
  let prompt: Omit<Usage, "completion_tokens"> = { prompt_tokens: 0 };
  let usage: Usage | undefined;
  // Anthropic numbers content blocks across text, thinking and tools; OpenAI numbers tool calls alone.
  const toolIndex = new Map<number, number>();

  // A chunk into the step `s`: its JSON for a chat client, the object itself for a door (which would only parse it).
  const put = (c: ChatCompletionChunk, s: StreamStep = {}): StreamStep => {
    if (door) s.parsed = c;
    else s.chunk = JSON.stringify(c);
    return s;
  };
  const chunk = (delta: ChunkDelta, finish: string | null = null, s?: StreamStep): StreamStep =>
    put({ id, object: "chat.completion.chunk", created, model, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] }, s);

  return (payload): StreamStep => {
    const ev = JSON.parse(payload) as StreamEvent;
    switch (ev.type) {
      case "message_start": {
        const msg: Pick<Message, "id" | "usage"> = ev.message ?? {};
        id = String(msg.id ?? "");
        prompt = promptOf(msg.usage ?? {});
        const { prompt_tokens: promptTokens, ...promptCache } = prompt;
        return chunk({ role: "assistant", content: "" }, null, { promptTokens, promptCache });
      }
      case "content_block_start": {
        const block = ev.content_block;
        if (block?.type === "tool_use") {
          const index = toolIndex.size;
          toolIndex.set(Number(ev.index), index);
          const name = String(block.name ?? "");
          const call: ToolCallDelta = { index, id: block.id, type: "function", function: { name, arguments: "" } };
          return chunk({ tool_calls: [call] }, null, { generated: name });
        }
        if (block?.type === "redacted_thinking") {
          return chunk({ thinking_blocks: [{ type: "redacted_thinking", data: block.data }] });
        }
        // a text or thinking block may open with text already in it
        if (block?.type === "text" && typeof block.text === "string" && block.text) {
          return chunk({ content: block.text }, null, { generated: block.text });
        }
        return {};
      }
      case "content_block_delta": {
        const d = ev.delta;
        if (d?.type === "text_delta" && typeof d.text === "string") return chunk({ content: d.text }, null, { generated: d.text });
        if (d?.type === "input_json_delta" && typeof d.partial_json === "string") {
          const index = toolIndex.get(Number(ev.index));
          if (index === undefined || d.partial_json === "") return { generated: d.partial_json };
          return chunk({ tool_calls: [{ index, function: { arguments: d.partial_json } }] }, null, { generated: d.partial_json });
        }
        if (d?.type === "thinking_delta" && typeof d.thinking === "string") {
          return chunk({ reasoning_content: d.thinking }, null, { generated: d.thinking });
        }
        if (d?.type === "signature_delta" && typeof d.signature === "string") {
          return chunk({ thinking_blocks: [{ type: "thinking", thinking: "", signature: d.signature }] });
        }
        return {}; // citations and later delta types: nothing an OpenAI client reads
      }
      case "message_delta": {
        const u: AnthropicUsage = ev.usage ?? {};
        // Newer API versions repeat the input counts here, cumulative like output_tokens.
        if (Number.isSafeInteger(u.input_tokens)) prompt = promptOf(u);
        if (Number.isSafeInteger(u.output_tokens)) usage = { ...prompt, completion_tokens: u.output_tokens as number };
        return chunk({}, finishReason(ev.delta?.stop_reason), { usage });
      }
      case "message_stop":
        if (includeUsage && usage) {
          const last: ChatCompletionChunk = {
            id,
            object: "chat.completion.chunk",
            created,
            model,
            choices: [],
            usage: usageBody(usage),
          };
          return put(last, { done: true });
        }
        return { done: true };
      case "error":
        return { failed: true };
      default:
        return {};
    }
  };
}
