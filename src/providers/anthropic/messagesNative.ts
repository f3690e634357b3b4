import { ApiError } from "../../errors.ts";
import type { ProviderAdapter, UpstreamParams } from "../types.ts";
import { anthropicHeaders, MESSAGES_PATH } from "./api.ts";
import { withCacheControl } from "./cacheControl.ts";
import { TOOL_SYSTEM_PROMPT_TOKENS } from "./chatRequest.ts";
import { anthropicError } from "./errors.ts";
import { fittedBudget } from "./thinking.ts";
import { MESSAGES_CLIENT, relayMessage, relayStream } from "./messagesRelay.ts";
import type {
  ClientBlock,
  ClientMessagesRequest,
  ContentBlock,
  ImageBlock,
  MessageParam,
  MessagesRequest,
  TextBlock,
  ThinkingConfig,
  Tool,
  ToolChoice,
  ToolResultBlock,
} from "./wire.ts";

type Obj = Record<string, unknown>;
const isObject = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);

// The request was checked block by block when it was read (messagesRequest.ts: the chat request that admits and
// bounds it); a block that still does not fit is a bug, answered as a plain 400.
function invalid(where: string): ApiError {
  return new ApiError({ code: "VALIDATION_ERROR", message: `${where}: not a content block this route accepts` });
}

function image(b: ClientBlock, where: string): ImageBlock {
  const s = b.source;
  if (s?.type === "base64") return { type: "image", source: { type: "base64", media_type: String(s.media_type), data: String(s.data) } };
  if (s?.type === "url") return { type: "image", source: { type: "url", url: String(s.url) } };
  throw invalid(where);
}

/**
 * One block rebuilt from its type's keys: its `cache_control` breakpoint (cacheControl.ts: the hold covers the
 * cache write it may cause, and the charge bills it at the catalog's write price) and the type's own fields;
 * `citations` and any other key a client added stay behind.
 */
function block(b: ClientBlock, where: string): ContentBlock {
  switch (b.type) {
    case "text":
      return withCacheControl({ type: "text", text: String(b.text) }, b);
    case "image":
      return withCacheControl(image(b, where), b);
    case "tool_use":
      return withCacheControl({ type: "tool_use", id: String(b.id), name: String(b.name), input: b.input as object }, b);
    case "tool_result": {
      const out: ToolResultBlock = { type: "tool_result", tool_use_id: String(b.tool_use_id) };
      if (typeof b.content === "string") out.content = b.content;
      else if (Array.isArray(b.content))
        out.content = (b.content as ClientBlock[]).map((c, i) => block(c, `${where}.content.${i}`) as TextBlock | ImageBlock);
      if (b.is_error === true) out.is_error = true;
      return withCacheControl(out, b);
    }
    case "thinking":
      return { type: "thinking", thinking: String(b.thinking), signature: typeof b.signature === "string" ? b.signature : "" };
    case "redacted_thinking":
      return { type: "redacted_thinking", data: String(b.data) };
    default:
      throw invalid(where);
  }
}

function content(c: unknown, where: string): string | ContentBlock[] {
  if (typeof c === "string") return c;
  return (c as ClientBlock[]).map((b, i) => block(b, `${where}.${i}`));
}

// System text as blocks: a string is one (none if empty).
function systemBlocks(system: unknown): TextBlock[] {
  if (typeof system === "string") return system.length > 0 ? [{ type: "text", text: system }] : [];
  if (!Array.isArray(system)) return [];
  return (system as ClientBlock[]).filter((b) => b.type === "text").map((b) => withCacheControl({ type: "text", text: String(b.text) }, b));
}

function tools(list: unknown): Tool[] | undefined {
  if (!Array.isArray(list) || list.length === 0) return undefined;
  return list.map((t: Obj) => {
    const tool: Tool = { name: String(t.name), input_schema: t.input_schema };
    if (typeof t.description === "string") tool.description = t.description;
    return withCacheControl(tool, t);
  });
}

function toolChoice(c: unknown): ToolChoice | undefined {
  if (!isObject(c)) return undefined;
  const out = (c.type === "tool" ? { type: "tool", name: String(c.name) } : { type: c.type }) as ToolChoice;
  if (typeof c.disable_parallel_tool_use === "boolean") out.disable_parallel_tool_use = c.disable_parallel_tool_use;
  return out;
}

// The budget form's budget lowered under the max_tokens that goes (fittedBudget), thinking left out where none fits.
function thinking(t: unknown, maxTokens: number): ThinkingConfig | undefined {
  if (!isObject(t) || typeof t.type !== "string") return undefined;
  if (t.type !== "enabled") return { type: t.type } as ThinkingConfig;
  const budget = typeof t.budget_tokens === "number" ? fittedBudget(t.budget_tokens, maxTokens) : (t.budget_tokens as number);
  return budget === undefined ? undefined : { type: "enabled", budget_tokens: budget };
}

/**
 * The client's Messages request as an Anthropic provider receives it: the same turns, blocks and options, with
 * the catalog's upstream model and the hold's `max_tokens`, each part rebuilt from the keys it may carry. What
 * could raise the provider's bill behind the hold or reach beyond the tokens does not go (`cache_control`
 * breakpoints do: the hold covers a cache write at its price, tariff/hold.ts): `service_tier`, `container`, `mcp_servers`, server tools (the last four refused when the request was read),
 * `output_config.format` (structured outputs add a prompt the hold does not see; as on chat, which drops
 * `response_format` for Claude), any beta field; `anthropic-beta` headers are not passed on either.
 */
export function nativeMessagesBody(client: ClientMessagesRequest, { model, stream, maxTokens }: UpstreamParams): MessagesRequest {
  const messages: MessageParam[] = [];
  // A system turn among the messages (the door takes one, as chat does; Anthropic's API does not) joins the system.
  const systemTurns: TextBlock[] = [];
  (client.messages as Obj[]).forEach((m, i) => {
    if (m.role === "system") systemTurns.push(...systemBlocks(m.content));
    else messages.push({ role: m.role as MessageParam["role"], content: content(m.content, `messages.${i}.content`) });
  });
  const out: MessagesRequest = { model: model.upstreamModel, max_tokens: maxTokens, messages };
  if (systemTurns.length > 0) out.system = [...systemBlocks(client.system), ...systemTurns];
  else if (typeof client.system === "string") {
    if (client.system.length > 0) out.system = client.system;
  } else if (Array.isArray(client.system)) out.system = systemBlocks(client.system);
  if (stream) out.stream = true;
  if (Array.isArray(client.stop_sequences)) {
    const stop = client.stop_sequences.filter((s): s is string => typeof s === "string");
    if (stop.length > 0) out.stop_sequences = stop;
  }
  const t = tools(client.tools);
  if (t) out.tools = t;
  const choice = toolChoice(client.tool_choice);
  if (choice) out.tool_choice = choice;
  const think = thinking(client.thinking, maxTokens);
  if (think) out.thinking = think;
  const effort = client.output_config?.effort;
  if (typeof effort === "string") out.output_config = { effort };
  for (const k of ["temperature", "top_p", "top_k"] as const) if (typeof client[k] === "number") out[k] = client[k];
  if (typeof client.metadata?.user_id === "string") out.metadata = { user_id: client.metadata.user_id };
  return out;
}

/**
 * The Messages door's dialect for an Anthropic provider: the client's request goes as it is (nativeMessagesBody),
 * the provider's answer comes back as it is with the requested model id (messagesRelay.ts), and the core reads its
 * usage to bill: input tokens with cache reads and writes, as the chat dialect counts them, and output tokens.
 */
export function nativeMessagesAdapter(client: ClientMessagesRequest): ProviderAdapter {
  return {
    request(p) {
      const payload = nativeMessagesBody(client, p);
      return {
        url: p.model.provider.baseUrl + MESSAGES_PATH,
        init: { method: "POST", headers: anthropicHeaders(p.model.provider.apiKey), body: JSON.stringify(payload) },
        hiddenPromptTokens: payload.tools ? TOOL_SYSTEM_PROMPT_TOKENS : 0,
      };
    },
    parse: relayMessage,
    openStream: (_includeUsage, modelId) => relayStream(modelId),
    upstreamError: anthropicError,
    clientFormat: MESSAGES_CLIENT,
  };
}
