/**
 * A Responses API request → the chat-completions request the core serves (ChatService.complete): the conversation
 * items become chat messages, the settings their chat names. Items referencing stored ones must be resolved first
 * (modules/responses/conversations.ts); what cannot be expressed is a 400 VALIDATION_ERROR naming it.
 */
import { ApiError } from "../../errors.ts";
import type { ChatMessage, ContentPart as ChatPart, ToolCall } from "../openai/wire.ts";
import type { ChatRequest } from "../types.ts";
import { customArguments, declaredTools, ResponsesTools } from "./tools.ts";
import type { ContentPart, Item, ResponsesRequest } from "./wire.ts";

function invalid(message: string): ApiError {
  return new ApiError({ code: "VALIDATION_ERROR", message: message.slice(0, 300) });
}

/** `input` as items: a string is one user message. */
export function inputItems(input: ResponsesRequest["input"]): Item[] {
  if (input === undefined || input === null) return [];
  if (typeof input === "string") return [{ type: "message", role: "user", content: input }];
  if (!Array.isArray(input)) throw invalid("input: must be a string or an array of items");
  return input;
}

/** One message part → chat's part; text kinds become text (an assistant's output_text or refusal too). */
function chatPart(part: ContentPart, where: string): ChatPart | Record<string, unknown> {
  switch (part?.type) {
    case "input_text":
    case "output_text":
    case "text":
      return { type: "text", text: String(part.text ?? "") };
    case "refusal":
      return { type: "text", text: String(part.refusal ?? "") };
    case "input_image":
      if (typeof part.image_url !== "string") throw invalid(`${where}: an input_image needs an image_url (file ids are not supported)`);
      return { type: "image_url", image_url: part.detail ? { url: part.image_url, detail: part.detail } : { url: part.image_url } };
    case "input_file":
      return { type: "file", file: { file_data: part.file_data, file_id: part.file_id, filename: part.filename } };
    default:
      throw invalid(`${where}: content part type "${String(part?.type).slice(0, 64)}" is not supported`);
  }
}

/** A message's content for chat: a string stays one; parts map one by one (all-text parts join for an assistant). */
function chatContent(content: Item["content"], role: string, where: string): string | ChatPart[] {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) throw invalid(`${where}.content: must be a string or an array of parts`);
  const parts = content.map((p, i) => chatPart(p, `${where}.content[${i}]`)) as ChatPart[];
  if (role === "assistant" || role === "system") return parts.map((p) => p.text ?? "").join("");
  return parts;
}

/**
 * The conversation items (resolved, in order) as chat messages, after the instructions as a system message. A call
 * of a namespaced tool goes under the chat name `tools` gave it; a custom tool's call and output go as a function
 * call (its input the one `input` argument) and its result; an `additional_tools` item's tools went to `tools`.
 */
export function chatMessages(items: Item[], instructions: string | null | undefined, tools = new ResponsesTools([])): ChatMessage[] {
  const messages: ChatMessage[] = [];
  if (typeof instructions === "string" && instructions !== "") messages.push({ role: "system", content: instructions });
  items.forEach((item, i) => {
    const where = `input[${i}]`;
    const type = item?.type ?? (item?.role ? "message" : undefined);
    if (type === "message") {
      // Chat providers take system, user, assistant; the Responses API's developer role is a system message.
      const role = item.role === "developer" ? "system" : item.role;
      if (role !== "user" && role !== "system" && role !== "assistant")
        throw invalid(`${where}.role: "${String(item.role).slice(0, 32)}" is not supported`);
      messages.push({ role, content: chatContent(item.content, role, where) });
    } else if (type === "function_call" || type === "custom_tool_call") {
      if (typeof item.call_id !== "string" || typeof item.name !== "string") throw invalid(`${where}: a ${type} needs call_id and name`);
      const name = tools.chatName(item.name, typeof item.namespace === "string" ? item.namespace : undefined);
      const args = type === "custom_tool_call" ? customArguments(item.input) : String(item.arguments ?? "");
      const call: ToolCall = { id: item.call_id, type: "function", function: { name, arguments: args } };
      // Calls of one turn are one assistant message (with its text, if the turn had some).
      const last = messages.at(-1);
      if (last?.role === "assistant") (last.tool_calls ??= []).push(call);
      else messages.push({ role: "assistant", content: null, tool_calls: [call] });
    } else if (type === "function_call_output" || type === "custom_tool_call_output") {
      if (typeof item.call_id !== "string") throw invalid(`${where}: a ${type} needs a call_id`);
      const out = item.output;
      const content =
        typeof out === "string" ? out : Array.isArray(out) ? (out.map((p, j) => chatPart(p, `${where}.output[${j}]`)) as ChatPart[]) : "";
      messages.push({ role: "tool", tool_call_id: item.call_id, content });
    } else if (type === "reasoning" || type === "additional_tools") {
      // Reasoning is the provider's own: chat providers take none back, so an echoed reasoning item is left out. An
      // additional_tools item declares tools, merged with the request's (declaredTools).
    } else {
      throw invalid(`${where}: item type "${String(type).slice(0, 64)}" is not supported`);
    }
  });
  return messages;
}

function chatToolChoice(choice: ResponsesRequest["tool_choice"], tools: ResponsesTools): unknown {
  if (typeof choice === "string") return choice;
  if ((choice?.type === "function" || choice?.type === "custom") && typeof choice.name === "string") {
    const name = tools.chatName(choice.name, typeof choice.namespace === "string" ? choice.namespace : undefined);
    return { type: "function", function: { name } };
  }
  throw invalid(`tool_choice: only "none", "auto", "required", a function or a custom tool are supported`);
}

function responseFormat(format: NonNullable<ResponsesRequest["text"]>["format"]): unknown {
  if (!format || format.type === "text") return undefined;
  if (format.type === "json_object") return { type: "json_object" };
  if (format.type === "json_schema") {
    const { name, schema, strict, description } = format;
    return {
      type: "json_schema",
      json_schema: {
        name: name ?? "response",
        schema,
        ...(typeof strict === "boolean" ? { strict } : {}),
        ...(description ? { description } : {}),
      },
    };
  }
  throw invalid(`text.format.type "${String(format.type).slice(0, 64)}" is not supported`);
}

/**
 * The chat-completions request for a Responses request whose conversation is `items` (previous turns resolved),
 * and its tools (tools.ts: the request's and its additional_tools items', the names its calls come back under, the
 * tools left out). A stream asks for the usage chunk: response.completed reports it.
 */
export function toChatRequest(body: ResponsesRequest, items: Item[]): { chat: ChatRequest; tools: ResponsesTools } {
  const tools = new ResponsesTools(declaredTools(body.tools, items));
  const chat: ChatRequest = { model: body.model, messages: chatMessages(items, body.instructions, tools) };
  if (typeof body.max_output_tokens === "number") chat.max_tokens = body.max_output_tokens;
  for (const k of [
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "top_logprobs",
  ] as const) {
    if (body[k] !== undefined && body[k] !== null) chat[k] = body[k];
  }
  if (tools.chat.length > 0) chat.tools = tools.chat;
  // A choice among tools that were all left out (or never declared) means nothing upstream, where chat refuses it.
  if (body.tool_choice !== undefined && body.tool_choice !== null && tools.chat.length > 0)
    chat.tool_choice = chatToolChoice(body.tool_choice, tools);
  const format = responseFormat(body.text?.format);
  if (format) chat.response_format = format;
  if (typeof body.text?.verbosity === "string") chat.verbosity = body.text.verbosity;
  if (typeof body.reasoning?.effort === "string") chat.reasoning_effort = body.reasoning.effort;
  if (body.stream === true) {
    chat.stream = true;
    chat.stream_options = { include_usage: true };
  }
  return { chat, tools };
}
