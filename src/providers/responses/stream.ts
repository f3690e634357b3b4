/**
 * The chat-completions SSE the core streams (its chunks, a usage chunk, possibly a StreamErrorEvent, `[DONE]`) →
 * the Responses API's event stream: response.created, response.in_progress, per output item its added / delta /
 * done events, then response.completed carrying the usage, or response.failed (fixed message) when the provider
 * failed mid-stream. It runs inside the core's metered stream (a DoorStream), so it reads as fast as its client
 * reads, and a client that leaves is billed by the core as for chat.
 *
 * Every event is written from text templates: the response frame is written once per request (wire.ts responseFrame),
 * an item's id and index once per item, so a delta costs its own JSON string. Chunks come parsed by the provider's
 * stream translator, which then skips its own text edit (StreamStep.parsed): one JSON.parse per chunk in all.
 * (Reading a plain content chunk as text instead of parsing it was tried: JSON.parse of a ~200-byte chunk is the
 * cheaper.)
 */
import type { ChatCompletionChunk, ToolCallDelta } from "../openai/wire.ts";
import { flat } from "../sse.ts";
import type { DoorStream } from "../types.ts";
import { callItem, incompleteReason } from "./answer.ts";
import type { Usage } from "../openai/wire.ts";
import { type ClientToolName, customInput, type ResponsesTools } from "./tools.ts";
import { type Frame, type Item, newId, responsesUsageJson } from "./wire.ts";

/** What a client reads when the provider failed after the stream started: no upstream detail. */
export const STREAM_FAILED = "The model provider failed during the stream";

const FAILED_ERROR = JSON.stringify({ code: "server_error", message: STREAM_FAILED });
const EMPTY_PART = '{"type":"output_text","text":"","annotations":[],"logprobs":[]}';

/** An item being streamed; `text`: a message's text, or a custom tool call's arguments as chat streams them. */
type Open = { item: Item; index: number; text: string; json?: string; ids: string };

/** `event: type` and the start of its data, up to the sequence number. */
const head = (type: string) => flat(`event: ${type}\ndata: {"type":"${type}","sequence_number":`);
const ADDED = head("response.output_item.added");
const ITEM_DONE = head("response.output_item.done");
const PART_ADDED = head("response.content_part.added");
const PART_DONE = head("response.content_part.done");
const TEXT_DELTA = head("response.output_text.delta");
const TEXT_DONE = head("response.output_text.done");
const ARGS_DELTA = head("response.function_call_arguments.delta");
const ARGS_DONE = head("response.function_call_arguments.done");
const INPUT_DELTA = head("response.custom_tool_call_input.delta");
const INPUT_DONE = head("response.custom_tool_call_input.done");
const CREATED = head("response.created");
const IN_PROGRESS = head("response.in_progress");
const COMPLETED = head("response.completed");
const INCOMPLETE = head("response.incomplete");
const FAILED = head("response.failed");

/**
 * Translates one chat stream; `finished` gets the output items of a completed answer and each one's JSON (the
 * store keeps them) once the answer's charge is queued (DoorStream.settled), so the store's writes leave before
 * response.completed does. `tools`: the request's, to name each call as the client declared its tool (a default
 * parameter, so the bench still tells this signature by its length).
 */
export function responsesStream(
  response: Frame,
  finished: (output: Item[], json: string[]) => void,
  tools: ResponsesTools | undefined = undefined,
): DoorStream {
  const output: Item[] = [];
  const outputJson: string[] = [];
  const open: Open[] = [];
  const calls = new Map<number, Open>();
  let message: Open | undefined;
  let seq = 0;
  let out = "";
  let usage: Partial<Usage> | undefined;
  // output_text: every message's text, and its JSON when there is one message (as it went out in its done events).
  let allText = "";
  let textJson: string | undefined;
  let messages = 0;
  let finish: string | null = null;
  let ended = false;
  // A completed answer is kept once its charge is queued (`settled`), so the store's writes ride with the settle.
  let charged = false;
  let keep: (() => void) | undefined;
  /** A lifecycle event (its head): the frame with these error and incomplete_details, then `rest` (its own fields). */
  const lifecycle = (type: string, error: string, details: string, rest: string) => {
    out += `${type}${seq++},"response":${response(error, details, rest)}}\n\n`;
  };

  function close(o: Open): void {
    const { item, index } = o;
    item.status = "completed";
    if (item.type === "message") {
      const text = JSON.stringify(o.text);
      allText += o.text;
      textJson = text;
      messages++;
      const part = `{"type":"output_text","text":${text},"annotations":[],"logprobs":[]}`;
      out += `${TEXT_DONE}${seq++}${o.ids},"content_index":0,"text":${text},"logprobs":[]}\n\n`;
      out += `${PART_DONE}${seq++}${o.ids},"content_index":0,"part":${part}}\n\n`;
      item.content = [{ type: "output_text", text: o.text, annotations: [], logprobs: [] } as never];
      o.json = flat(`{"id":"${item.id}","type":"message","status":"completed","role":"assistant","content":[${part}]}`);
    } else if (item.type === "custom_tool_call") {
      // Its input is a string inside the chat call's JSON arguments: read once they are whole, then sent as one delta.
      const input = customInput(o.text);
      item.input = input;
      const json = JSON.stringify(input);
      if (input !== "") out += `${INPUT_DELTA}${seq++}${o.ids},"delta":${json}}\n\n`;
      out += `${INPUT_DONE}${seq++}${o.ids},"input":${json}}\n\n`;
      o.json = JSON.stringify(item);
    } else {
      out += `${ARGS_DONE}${seq++}${o.ids},"arguments":${JSON.stringify(item.arguments)}}\n\n`;
      o.json = JSON.stringify(item);
    }
    outputJson[index] = o.json;
    out += `${ITEM_DONE}${seq++},"output_index":${index},"item":${o.json}}\n\n`;
    open.splice(open.indexOf(o), 1);
    if (o === message) message = undefined;
  }

  function add(item: Item, json: string): Open {
    const index = output.length;
    const o = { item, index, text: "", ids: flat(`,"item_id":"${item.id}","output_index":${index}`) };
    output.push(item);
    open.push(o);
    out += `${ADDED}${seq++},"output_index":${index},"item":${json}}\n\n`;
    return o;
  }

  function text(delta: string): void {
    if (!message) {
      // Items stream one after another: a call still open ends before a new message starts.
      while (open.length) close(open[0]!);
      const id = newId("msg");
      const item: Item = { id, type: "message", status: "in_progress", role: "assistant", content: [] };
      message = add(item, `{"id":"${id}","type":"message","status":"in_progress","role":"assistant","content":[]}`);
      out += `${PART_ADDED}${seq++}${message.ids},"content_index":0,"part":${EMPTY_PART}}\n\n`;
    }
    message.text += delta;
    out += `${TEXT_DELTA}${seq++}${message.ids},"content_index":0,"delta":${JSON.stringify(delta)},"logprobs":[]}\n\n`;
  }

  function toolCall(d: ToolCallDelta): void {
    const at = d.index ?? 0;
    let o = calls.get(at);
    if (!o) {
      while (open.length) close(open[0]!);
      const named: ClientToolName = tools ? tools.clientName(d.function?.name ?? "") : { name: d.function?.name ?? "" };
      const callId = d.id ?? `call_${newId("fc").slice(3)}`;
      const item = callItem(named, newId(named.custom ? "ctc" : "fc"), "in_progress", callId, "");
      o = add(item, JSON.stringify(item));
      calls.set(at, o);
    }
    const args = d.function?.arguments;
    if (args && o.item.type === "custom_tool_call") o.text += args;
    else if (args) {
      o.item.arguments += args;
      out += `${ARGS_DELTA}${seq++}${o.ids},"delta":${JSON.stringify(args)}}\n\n`;
    }
  }

  /** One chat payload: more to come, the end ([DONE]), or a failure (a StreamErrorEvent). */
  function step(payload: string | object): "more" | "done" | "failed" {
    if (payload === "[DONE]") return "done";
    const chunk = (typeof payload === "string" ? JSON.parse(payload) : payload) as ChatCompletionChunk & { error?: unknown };
    if (chunk.error) return "failed";
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices?.[0];
    if (choice?.delta?.content) text(choice.delta.content);
    for (const d of choice?.delta?.tool_calls ?? []) toolCall(d);
    if (choice?.finish_reason) finish = choice.finish_reason;
    return "more";
  }

  function end(ok: boolean): void {
    ended = true;
    while (open.length) close(open[0]!);
    const items = `[${outputJson.join(",")}]`;
    // No usage before [DONE]: the core stopped the stream (its time cap), so the answer is not complete.
    if (ok && usage) {
      // Kept before the client reads response.completed: the store's write is queued ahead of a next turn's read.
      keep = () => finished(output, outputJson);
      if (charged) keep();
      const reason = incompleteReason(finish);
      const status = reason ? "incomplete" : "completed";
      const details = reason ? `{"reason":"${reason}"}` : "null";
      const text = messages === 1 ? textJson : JSON.stringify(allText);
      const rest = `,"status":"${status}","output":${items},"output_text":${text},"usage":${responsesUsageJson(usage)}`;
      lifecycle(reason ? INCOMPLETE : COMPLETED, "null", details, rest);
    } else {
      lifecycle(FAILED, FAILED_ERROR, "null", `,"status":"failed","output":${items},"usage":null`);
    }
  }

  return {
    open() {
      const rest = ',"status":"in_progress","output":[],"usage":null';
      lifecycle(CREATED, "null", "null", rest);
      lifecycle(IN_PROGRESS, "null", "null", rest);
      const text = out;
      out = "";
      return text;
    },
    settled() {
      charged = true;
      keep?.();
    },
    next(payload) {
      if (ended) return "";
      let r: ReturnType<typeof step>;
      try {
        r = step(payload);
      } catch {
        r = "failed";
      }
      if (r !== "more") end(r === "done");
      const text = out;
      out = "";
      return text;
    },
  };
}
