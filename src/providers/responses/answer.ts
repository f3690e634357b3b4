/**
 * A chat-completions answer (the core's JSON) → the Responses API's `response` object: the assistant's text as a
 * message item, each tool call as a function_call item (a custom tool's as a custom_tool_call), the usage in the
 * Responses API's names.
 */
import type { ChatCompletion } from "../openai/wire.ts";
import { type ClientToolName, customInput, type ResponsesTools } from "./tools.ts";
import { type Frame, type Item, newId, outputText, responsesUsageJson } from "./wire.ts";

/** A finish reason that cut the answer short, as the Responses API reports it (null: the answer is complete). */
export function incompleteReason(finish: string | null | undefined): string | null {
  if (finish === "length") return "max_output_tokens";
  if (finish === "content_filter") return "content_filter";
  return null;
}

/**
 * The output item of a chat call of the tool the client calls `named`, in the Responses API's order of fields: a
 * custom tool's call with its input, any other a function call with its arguments (a namespaced tool's with its
 * namespace). `status` and `id` as the caller has them.
 */
export function callItem(named: ClientToolName, id: string, status: string, callId: string, args: string): Item {
  const namespace = named.namespace === undefined ? {} : { namespace: named.namespace };
  if (named.custom)
    return { id, type: "custom_tool_call", status, call_id: callId, name: named.name, ...namespace, input: customInput(args) };
  return { id, type: "function_call", status, call_id: callId, name: named.name, ...namespace, arguments: args };
}

/**
 * The output items of one chat answer: a message when it has text (or nothing else), then its calls, each named
 * as the client declared its tool (a namespaced one with its namespace, a custom one as a custom_tool_call).
 */
function outputItems(choice: ChatCompletion["choices"][number] | undefined, tools?: ResponsesTools): Item[] {
  const message = choice?.message;
  const items: Item[] = [];
  const calls = message?.tool_calls ?? [];
  const text = typeof message?.content === "string" ? message.content : "";
  if (text !== "" || calls.length === 0) {
    const part = message?.refusal
      ? { type: "refusal", refusal: message.refusal }
      : { type: "output_text", text, annotations: [], logprobs: [] };
    items.push({ id: newId("msg"), type: "message", status: "completed", role: "assistant", content: [part] });
  }
  for (const c of calls) {
    const chatName = c.function?.name;
    const named: ClientToolName = tools && typeof chatName === "string" ? tools.clientName(chatName) : { name: chatName as string };
    items.push(callItem(named, newId(named.custom ? "ctc" : "fc"), "completed", c.id, c.function?.arguments ?? ""));
  }
  return items;
}

/**
 * The `response` object (JSON text) for a chat answer, in the request's frame (wire.ts responseFrame); its output
 * items too, and each one's JSON (the store keeps them as the client read them). `parsed`: the chat JSON as an object,
 * when the adapter had it; `tools`: the request's (its calls' names back).
 */
export function responseObject(
  frame: Frame,
  chatJson: string,
  parsed?: object,
  tools?: ResponsesTools,
): { json: string; output: Item[]; outputJson: string[] } {
  const chat = (parsed ?? JSON.parse(chatJson)) as ChatCompletion;
  const choice = chat.choices?.[0];
  const output = outputItems(choice, tools);
  const outputJson = output.map((item) => JSON.stringify(item));
  const reason = incompleteReason(choice?.finish_reason);
  const rest =
    `,"status":"${reason ? "incomplete" : "completed"}","output":[${outputJson.join(",")}]` +
    `,"output_text":${JSON.stringify(outputText(output))},"usage":${chat.usage ? responsesUsageJson(chat.usage) : "null"}`;
  return { json: frame("null", reason ? `{"reason":"${reason}"}` : "null", rest), output, outputJson };
}
