import { ApiError } from "../../errors.ts";
import type { ChatMessage, ContentPart, FunctionTool, ThinkingBlock, ToolCall } from "../openai/wire.ts";
import type { ChatRequest } from "../types.ts";
import type { ClientBlock, ClientMessagesRequest } from "./wire.ts";

function invalid(message: string): ApiError {
  return new ApiError({ code: "VALIDATION_ERROR", message });
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

// A client's blocks: a string is one text block.
function blocksOf(content: unknown, where: string): ClientBlock[] {
  if (typeof content === "string") return [{ type: "text", text: content }];
  if (!Array.isArray(content)) throw invalid(`${where}: must be a string or an array of content blocks`);
  return content.map((b, i) => {
    if (!isObject(b)) throw invalid(`${where}.${i}: must be a content block`);
    return b as ClientBlock;
  });
}

function text(b: ClientBlock, where: string): string {
  if (typeof b.text !== "string") throw invalid(`${where}.text: must be a string`);
  return b.text;
}

function imagePart(b: ClientBlock, where: string): ContentPart {
  const s = b.source;
  if (s?.type === "base64" && typeof s.media_type === "string" && typeof s.data === "string") {
    return { type: "image_url", image_url: { url: `data:${s.media_type};base64,${s.data}` } };
  }
  if (s?.type === "url" && typeof s.url === "string") return { type: "image_url", image_url: { url: s.url } };
  throw invalid(`${where}.source: an image needs a base64 (media_type, data) or url source`);
}

// Text and images: what a user turn and a tool result may carry here.
function partsOf(blocks: ClientBlock[], where: string): ContentPart[] {
  return blocks.map((b, i) => {
    if (b.type === "text") return { type: "text", text: text(b, `${where}.${i}`) };
    if (b.type === "image") return imagePart(b, `${where}.${i}`);
    throw invalid(`${where}.${i}: content block type "${String(b.type).slice(0, 64)}" is not supported`);
  });
}

// A user turn: its tool results first, as chat `tool` messages (they must follow the assistant's tool calls),
// then the rest as one user message.
function userTurn(content: unknown, where: string): ChatMessage[] {
  if (typeof content === "string") return [{ role: "user", content }];
  const out: ChatMessage[] = [];
  const rest: ClientBlock[] = [];
  blocksOf(content, where).forEach((b, i) => {
    if (b.type !== "tool_result") return void rest.push(b);
    if (typeof b.tool_use_id !== "string") throw invalid(`${where}.${i}.tool_use_id: must be a string`);
    const result =
      b.content === undefined
        ? ""
        : typeof b.content === "string"
          ? b.content
          : partsOf(blocksOf(b.content, `${where}.${i}.content`), `${where}.${i}.content`);
    out.push({ role: "tool", tool_call_id: b.tool_use_id, content: result });
  });
  if (rest.length > 0) out.push({ role: "user", content: partsOf(rest, where) });
  return out;
}

// An assistant turn: text joined, tool_use blocks as tool calls, thinking sent back verbatim (thinking_blocks).
function assistantTurn(content: unknown, where: string): ChatMessage {
  if (typeof content === "string") return { role: "assistant", content };
  let said = "";
  const calls: ToolCall[] = [];
  const thinking: ThinkingBlock[] = [];
  blocksOf(content, where).forEach((b, i) => {
    const at = `${where}.${i}`;
    if (b.type === "text") said += text(b, at);
    else if (b.type === "tool_use") {
      if (typeof b.id !== "string" || typeof b.name !== "string" || !isObject(b.input))
        throw invalid(`${at}: tool_use needs an id, a name and an input object`);
      calls.push({ id: b.id, type: "function", function: { name: b.name, arguments: JSON.stringify(b.input) } });
    } else if (b.type === "thinking" && typeof b.thinking === "string") {
      thinking.push({ type: "thinking", thinking: b.thinking, signature: typeof b.signature === "string" ? b.signature : "" });
    } else if (b.type === "redacted_thinking" && typeof b.data === "string") thinking.push({ type: "redacted_thinking", data: b.data });
    else throw invalid(`${at}: content block type "${String(b.type).slice(0, 64)}" is not supported in an assistant turn`);
  });
  const m: ChatMessage = { role: "assistant", content: said.length > 0 || calls.length === 0 ? said : null };
  if (calls.length > 0) m.tool_calls = calls;
  if (thinking.length > 0) m.thinking_blocks = thinking;
  return m;
}

function systemMessage(system: unknown): ChatMessage[] {
  if (system === undefined || system === null) return [];
  if (typeof system === "string") return system.length > 0 ? [{ role: "system", content: system }] : [];
  return [{ role: "system", content: partsOf(blocksOf(system, "system"), "system") }];
}

function chatMessages(body: ClientMessagesRequest): ChatMessage[] {
  if (!Array.isArray(body.messages)) throw invalid("messages: Field required");
  const out = systemMessage(body.system);
  body.messages.forEach((m: { role?: unknown; content?: unknown } | null, i) => {
    const where = `messages.${i}`;
    if (m?.role === "user") out.push(...userTurn(m.content, `${where}.content`));
    else if (m?.role === "assistant") out.push(assistantTurn(m.content, `${where}.content`));
    else if (m?.role === "system") out.push(...systemMessage(m.content));
    else throw invalid(`${where}.role: must be "user" or "assistant"`);
  });
  return out;
}

/**
 * Client tools as chat's function tools. Tools the provider runs itself (web search, code execution…) are billed
 * per call beyond the tokens: refused, unless `leftOut` is given (no provider of the request can run them: a
 * translated path), where their types go instead and the tools stay behind.
 */
function chatTools(tools: unknown, leftOut?: string[]): FunctionTool[] | undefined {
  if (tools === undefined || tools === null) return undefined;
  if (!Array.isArray(tools)) throw invalid("tools: must be an array");
  const out: FunctionTool[] = [];
  tools.forEach((t: Record<string, unknown> | null, i) => {
    if (t?.type !== undefined && t.type !== null && t.type !== "custom") {
      const type = String(t.type).slice(0, 64);
      if (leftOut) return void (leftOut.includes(type) || leftOut.push(type));
      throw invalid(
        `tools.${i}.type "${String(t.type).slice(0, 64)}" is not accepted: only client tools, since tools a provider runs itself are billed per call`,
      );
    }
    if (typeof t?.name !== "string" || !isObject(t.input_schema))
      throw invalid(`tools.${i}: a tool needs a name and an input_schema object`);
    const fn: FunctionTool["function"] = { name: t.name, parameters: t.input_schema };
    if (typeof t.description === "string") fn.description = t.description;
    out.push({ type: "function", function: fn });
  });
  return out;
}

function chatToolChoice(choice: unknown, out: ChatRequest): void {
  if (choice === undefined || choice === null) return;
  const c = choice as { type?: unknown; name?: unknown; disable_parallel_tool_use?: unknown };
  if (c.type === "auto") out.tool_choice = "auto";
  else if (c.type === "any") out.tool_choice = "required";
  else if (c.type === "none") out.tool_choice = "none";
  else if (c.type === "tool" && typeof c.name === "string") out.tool_choice = { type: "function", function: { name: c.name } };
  else throw invalid('tool_choice: must be {type: "auto" | "any" | "none"} or {type: "tool", name}');
  if (c.disable_parallel_tool_use === true) out.parallel_tool_calls = false;
}

// Effort levels of output_config → reasoning_effort (thinking.ts maps it to the provider's controls).
const EFFORT: Record<string, string> = { low: "low", medium: "medium", high: "high", xhigh: "xhigh", max: "xhigh" };
// Beta features that run on the provider's side, billed beyond the tokens.
const REFUSED: Record<string, string> = { container: "code execution containers", mcp_servers: "MCP servers the provider calls" };

/**
 * A Messages API request (`POST /v1/messages`) → the chat-completions request the core serves: system and turns
 * to chat messages (tool results to `tool` messages, thinking to `thinking_blocks`), tools, tool_choice, thinking
 * (passed on in Anthropic's own shape, which the chat dialect takes), stop_sequences, sampling, metadata.user_id
 * as `user`. `max_tokens` is required, as in Anthropic's API, unless the request is only counted. A stream asks
 * for the chat usage chunk, which the door reports in message_delta. cache_control and the like are ignored here (to an Anthropic provider
 * the native dialect passes the client's breakpoints on, messagesNative.ts).
 * `leftOut`: the request goes only to providers that cannot run server tools (chat completions): those are left
 * out, their types collected there, rather than refused.
 */
export function chatRequestOf(body: ClientMessagesRequest, counting = false, leftOut?: string[]): ChatRequest {
  if (!isObject(body)) throw invalid("The body must be a JSON object");
  if (typeof body.model !== "string") throw invalid("model: Field required");
  for (const field in REFUSED)
    if (body[field] !== undefined && body[field] !== null)
      throw invalid(`${field} is not accepted: ${REFUSED[field]} are billed beyond the tokens`);
  const out: ChatRequest = { model: body.model, messages: chatMessages(body) };
  if (!counting) {
    if (!Number.isSafeInteger(body.max_tokens) || (body.max_tokens as number) < 1)
      throw invalid("max_tokens: Field required (a positive integer)");
    out.max_tokens = body.max_tokens as number;
  }
  const tools = chatTools(body.tools, leftOut);
  if (tools && tools.length > 0) out.tools = tools;
  // A choice among tools that were all left out means nothing upstream, where chat refuses it.
  if (!(tools && tools.length === 0)) chatToolChoice(body.tool_choice, out);
  if (isObject(body.thinking)) out.thinking = body.thinking;
  const effort = body.output_config?.effort;
  if (typeof effort === "string" && Object.hasOwn(EFFORT, effort)) out.reasoning_effort = EFFORT[effort];
  const format = body.output_config?.format;
  if (format?.type === "json_schema" && isObject(format.schema))
    out.response_format = { type: "json_schema", json_schema: { name: "output", schema: format.schema } };
  if (Array.isArray(body.stop_sequences)) out.stop = body.stop_sequences.filter((s) => typeof s === "string");
  for (const k of ["temperature", "top_p", "top_k"] as const) if (typeof body[k] === "number") out[k] = body[k];
  if (typeof body.metadata?.user_id === "string") out.user = body.metadata.user_id;
  // Priority tiers cost more: passed on so that the core refuses it as it does for chat.
  if (body.service_tier !== undefined) out.service_tier = body.service_tier;
  if (body.stream === true && !counting) {
    out.stream = true;
    out.stream_options = { include_usage: true };
  }
  return out;
}
