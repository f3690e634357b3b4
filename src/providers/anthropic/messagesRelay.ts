import type { ClientFormat, ParsedCompletion, StreamStep, StreamTranslator, Usage } from "../types.ts";
import { promptOf, usageOf } from "./chatResponse.ts";
import { messagesUsageOf } from "./messagesAnswer.ts";
import { STREAM_FAILED } from "./messagesStream.ts";
import type { Message, StreamEvent, Usage as AnthropicUsage } from "./wire.ts";

type Obj = Record<string, unknown>;
const encoder = new TextEncoder();
const errorEvent = (error: { type: string; message: string }) =>
  encoder.encode(`event: error\ndata: ${JSON.stringify({ type: "error", error })}\n\n`);

/**
 * What the gateway itself writes to a Messages client of an Anthropic provider: nothing after the provider's
 * message_stop; an `error` event with a fixed message when the provider fails mid-stream or the stream is cut at
 * the time cap; Anthropic's usage fields when it counted the usage itself.
 */
export const MESSAGES_CLIENT: ClientFormat = {
  done: new Uint8Array(0),
  failed: errorEvent(STREAM_FAILED),
  cut: errorEvent({ type: "timeout_error", message: "The stream reached the gateway's time limit" }),
  usage: (u, charge) => ({ ...messagesUsageOf(u), charge_usdc: charge }),
};

// What the answer generated, for counting when the provider reported no usage.
function generatedOf(content: Obj[]): string {
  let out = "";
  for (const b of content) {
    if (b?.type === "text" && typeof b.text === "string") out += b.text;
    else if (b?.type === "thinking" && typeof b.thinking === "string") out += b.thinking;
    else if (b?.type === "tool_use") out += String(b.name) + JSON.stringify(b.input ?? {});
  }
  return out;
}

/**
 * An Anthropic answer passed back as it came, but for `model` (the id the client asked for, not the provider's
 * name); its usage is what the core bills.
 */
export function relayMessage(text: string, modelId: string): ParsedCompletion {
  const msg = JSON.parse(text) as Message & Obj;
  if (msg?.type !== "message" || !Array.isArray(msg.content)) throw new Error("upstream body is not a message");
  msg.model = modelId;
  const usage = usageOf(msg.usage);
  return { json: JSON.stringify(msg), usage, generated: usage ? "" : generatedOf(msg.content as unknown as Obj[]) };
}

// An SSE event name is written on its own line: anything but a plain name is not passed on.
const EVENT_NAME = /^[a-z_]{1,64}$/;

/**
 * One Anthropic stream passed on event by event under its own name, as the provider sent it (message_start with the
 * requested model id), while the usage is read as the chat dialect reads it: input tokens with cache reads and
 * writes from message_start (exact if the client leaves early), the final counts from message_delta, the generated
 * text for counting when they never come. An `error` event is not passed on: the core ends the stream with
 * MESSAGES_CLIENT's fixed one and releases the hold.
 */
export function relayStream(modelId: string): StreamTranslator {
  let prompt: Omit<Usage, "completion_tokens"> = { prompt_tokens: 0 };
  return (payload): StreamStep => {
    const ev = JSON.parse(payload) as StreamEvent & Obj;
    const name = typeof ev?.type === "string" && EVENT_NAME.test(ev.type) ? ev.type : undefined;
    if (!name) return {};
    // A data field is one line: a provider's multi-line JSON is written again on one.
    const step: StreamStep = { chunk: payload.includes("\n") ? JSON.stringify(ev) : payload, event: name };
    switch (ev.type) {
      case "message_start": {
        const msg = ev.message as (Message & Obj) | undefined;
        prompt = promptOf(msg?.usage ?? {});
        const { prompt_tokens, ...cache } = prompt;
        step.promptTokens = prompt_tokens;
        step.promptCache = cache;
        if (msg && typeof msg === "object") {
          msg.model = modelId;
          step.chunk = JSON.stringify(ev);
        }
        return step;
      }
      case "content_block_start": {
        const b = ev.content_block;
        if (b?.type === "tool_use") step.generated = String(b.name ?? "");
        else if (b?.type === "text" && typeof b.text === "string") step.generated = b.text;
        return step;
      }
      case "content_block_delta": {
        const d = ev.delta;
        if (d?.type === "text_delta") step.generated = d.text;
        else if (d?.type === "thinking_delta") step.generated = d.thinking;
        else if (d?.type === "input_json_delta") step.generated = d.partial_json;
        if (typeof step.generated !== "string") delete step.generated;
        return step;
      }
      case "message_delta": {
        const u: AnthropicUsage = ev.usage ?? {};
        // Newer API versions repeat the input counts here, cumulative like output_tokens.
        if (Number.isSafeInteger(u.input_tokens)) prompt = promptOf(u);
        if (Number.isSafeInteger(u.output_tokens)) step.usage = { ...prompt, completion_tokens: u.output_tokens as number };
        return step;
      }
      case "message_stop":
        step.done = true;
        return step;
      case "error":
        return { failed: true };
      default:
        return step;
    }
  };
}
