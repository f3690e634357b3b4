/**
 * A chat-completions answer (the core's JSON) → the Responses API's `response` object: the assistant's text as a
 * message item, each tool call as a function_call item, the usage in the Responses API's names.
 */
import type { ChatCompletion } from "../openai/wire.ts";
import { type Item, newId, outputText, responsesUsage } from "./wire.ts";

/** A finish reason that cut the answer short, as the Responses API reports it (null: the answer is complete). */
export function incompleteReason(finish: string | null | undefined): string | null {
  if (finish === "length") return "max_output_tokens";
  if (finish === "content_filter") return "content_filter";
  return null;
}

/** The output items of one chat answer: a message when it has text (or nothing else), then its calls. */
function outputItems(choice: ChatCompletion["choices"][number] | undefined): Item[] {
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
    items.push({
      id: newId("fc"),
      type: "function_call",
      status: "completed",
      call_id: c.id,
      name: c.function?.name,
      arguments: c.function?.arguments ?? "",
    });
  }
  return items;
}

/**
 * The `response` object (JSON text) for a chat answer, in the request's frame (wire.ts responseFrame); its output
 * items too, and each one's JSON (the store keeps them as the client read them).
 */
export function responseObject(frame: Record<string, unknown>, chatJson: string): { json: string; output: Item[]; outputJson: string[] } {
  const chat = JSON.parse(chatJson) as ChatCompletion;
  const choice = chat.choices?.[0];
  const output = outputItems(choice);
  const reason = incompleteReason(choice?.finish_reason);
  const body = {
    ...frame,
    status: reason ? "incomplete" : "completed",
    incomplete_details: reason ? { reason } : null,
    output,
    output_text: outputText(output),
    usage: chat.usage ? responsesUsage(chat.usage) : null,
  };
  return { json: JSON.stringify(body), output, outputJson: output.map((item) => JSON.stringify(item)) };
}
