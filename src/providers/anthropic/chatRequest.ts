import { ApiError } from "../../errors.ts";
import type {
  ChatMessage,
  ContentPart,
  FunctionTool,
  NamedToolChoice,
  ToolCall,
  ThinkingBlock as ClientThinkingBlock,
} from "../openai/wire.ts";
import type { UpstreamParams } from "../types.ts";
import { withCacheControl } from "./cacheControl.ts";
import { claudeCapabilities } from "./models.ts";
import { thinkingParams } from "./thinking.ts";
import type {
  ContentBlock,
  ImageBlock,
  MessageParam,
  MessagesRequest,
  TextBlock,
  Tool,
  ToolChoice,
  ToolResultBlock,
  ToolUseBlock,
} from "./wire.ts";

/** A turn while it is built: blocks are merged in before the turn is sent. */
interface Turn {
  role: "user" | "assistant";
  content: ContentBlock[];
}

function invalid(message: string): ApiError {
  return new ApiError({ code: "VALIDATION_ERROR", message });
}

// Anthropic refuses empty text blocks, so empty strings are dropped rather than sent.
function textBlock(text: string): TextBlock[] {
  return text.length > 0 ? [{ type: "text", text }] : [];
}

const DATA_URL = /^data:([\w.+-]+\/[\w.+-]+);base64,(.*)$/s;

function imageBlock(part: ContentPart, where: string): ImageBlock {
  const url = part.image_url?.url;
  if (typeof url !== "string") throw invalid(`${where}.image_url.url must be a string`);
  const data = DATA_URL.exec(url);
  if (data) return { type: "image", source: { type: "base64", media_type: data[1]!, data: data[2]! } };
  return { type: "image", source: { type: "url", url } };
}

function contentBlocks(content: ChatMessage["content"], where: string, images: false): TextBlock[];
function contentBlocks(content: ChatMessage["content"], where: string, images: true): (TextBlock | ImageBlock)[];
function contentBlocks(content: ChatMessage["content"], where: string, images: boolean): (TextBlock | ImageBlock)[] {
  if (content === null || content === undefined) return [];
  if (typeof content === "string") return textBlock(content);
  const blocks: (TextBlock | ImageBlock)[] = [];
  // A part's `cache_control` breakpoint (as OpenRouter and LiteLLM take it on chat) reaches Anthropic on its block.
  content.forEach((part, i) => {
    if (part?.type === "text" && typeof part.text === "string") blocks.push(...textBlock(part.text).map((b) => withCacheControl(b, part)));
    else if (part?.type === "image_url" && images) blocks.push(withCacheControl(imageBlock(part, `${where}[${i}]`), part));
    else throw invalid(`${where}[${i}]: content part type "${String(part?.type)}" is not supported for this model`);
  });
  return blocks;
}

// A tool result may only carry text and images.
function toolResultContent(content: ChatMessage["content"], where: string): string | (TextBlock | ImageBlock)[] {
  if (typeof content === "string") return content;
  return contentBlocks(content, where, true);
}

function toolUseBlocks(calls: ToolCall[] | undefined, where: string): ToolUseBlock[] {
  if (!Array.isArray(calls)) return [];
  return calls.map((c, i) => {
    const at = `${where}.tool_calls[${i}]`;
    if (typeof c?.id !== "string" || typeof c.function?.name !== "string") throw invalid(`${at} needs an id and a function name`);
    const args = c.function.arguments;
    let input: unknown = {};
    if (typeof args === "string" && args.trim() !== "") {
      try {
        input = JSON.parse(args);
      } catch {
        input = undefined;
      }
    }
    if (!input || typeof input !== "object" || Array.isArray(input)) throw invalid(`${at}.function.arguments must be a JSON object`);
    return { type: "tool_use", id: c.id, name: c.function.name, input };
  });
}

// thinking_blocks (LiteLLM's field, which our answers carry) go back verbatim: Anthropic needs the signed
// thinking that preceded a tool call when the conversation continues with its result.
function thinkingBlocks(blocks: ClientThinkingBlock[] | undefined): ContentBlock[] {
  if (!Array.isArray(blocks)) return [];
  const out: ContentBlock[] = [];
  for (const b of blocks) {
    if (b?.type === "thinking" && typeof b.thinking === "string" && typeof b.signature === "string") {
      out.push({ type: "thinking", thinking: b.thinking, signature: b.signature });
    } else if (b?.type === "redacted_thinking" && typeof b.data === "string") {
      out.push({ type: "redacted_thinking", data: b.data });
    }
  }
  return out;
}

/**
 * OpenAI messages → Anthropic's `system` and alternating turns. System and developer messages, wherever they
 * stand, go to `system` (Anthropic has no system role in messages). Tool results become tool_result blocks of a
 * user turn, and consecutive turns of one role are merged, which is how Anthropic wants several tool results
 * answering one assistant turn.
 */
export function toAnthropicMessages(messages: ChatMessage[]): { system: TextBlock[]; turns: Turn[] } {
  const system: TextBlock[] = [];
  const turns: Turn[] = [];
  const push = (role: Turn["role"], blocks: ContentBlock[]) => {
    if (blocks.length === 0) return;
    const last = turns.at(-1);
    if (last?.role === role) last.content.push(...blocks);
    else turns.push({ role, content: blocks });
  };
  messages.forEach((m, i) => {
    const where = `messages[${i}]`;
    switch (m.role) {
      case "system":
      case "developer":
        system.push(...contentBlocks(m.content, `${where}.content`, false));
        break;
      case "user":
        push("user", contentBlocks(m.content, `${where}.content`, true));
        break;
      case "assistant":
        push("assistant", [
          ...thinkingBlocks(m.thinking_blocks),
          ...contentBlocks(m.content, `${where}.content`, false),
          ...toolUseBlocks(m.tool_calls, where),
        ]);
        break;
      case "tool": {
        if (typeof m.tool_call_id !== "string") throw invalid(`${where}.tool_call_id must be a string`);
        const content = toolResultContent(m.content, `${where}.content`);
        const block: ToolResultBlock = { type: "tool_result", tool_use_id: m.tool_call_id };
        if (content.length > 0) block.content = content;
        push("user", [block]);
        break;
      }
      default:
        throw invalid(`${where}.role "${String(m.role)}" is not supported for this model`);
    }
  });
  return { system, turns };
}

// A turn of one text block is sent as a plain string, the form Anthropic's own examples use.
function compact(turn: Turn): MessageParam {
  const only = turn.content.length === 1 ? turn.content[0] : undefined;
  if (only?.type === "text" && Object.keys(only).length === 2) return { role: turn.role, content: only.text };
  return turn;
}

function toAnthropicTools(tools: unknown): Tool[] | undefined {
  if (!Array.isArray(tools) || tools.length === 0) return undefined;
  return tools.map((t: FunctionTool, i) => {
    if (t?.type !== "function" || typeof t.function?.name !== "string") {
      throw invalid(`tools[${i}]: only function tools with a name are supported for this model`);
    }
    const tool: Tool = { name: t.function.name, input_schema: t.function.parameters ?? { type: "object", properties: {} } };
    if (typeof t.function.description === "string") tool.description = t.function.description;
    return tool;
  });
}

function toAnthropicToolChoice(choice: unknown, parallel: unknown): ToolChoice | undefined {
  let out: ToolChoice | undefined;
  if (choice === "auto") out = { type: "auto" };
  else if (choice === "none") out = { type: "none" };
  else if (choice === "required") out = { type: "any" };
  else if (choice && typeof choice === "object") {
    const name = (choice as NamedToolChoice).function?.name;
    if (typeof name !== "string") throw invalid("tool_choice.function.name must be a string");
    out = { type: "tool", name };
  } else if (choice !== undefined) throw invalid('tool_choice must be "auto", "none", "required" or a function');
  if (parallel === false && out?.type !== "none") out = { ...(out ?? { type: "auto" }), disable_parallel_tool_use: true };
  return out;
}

/**
 * With tools, Anthropic adds a tool-use system prompt the body does not show: 159–530 tokens by model and
 * tool_choice in its documentation, so 600 covers every model (the hold's hidden prompt tokens).
 */
export const TOOL_SYSTEM_PROMPT_TOKENS = 600;

/**
 * The OpenAI request → a Messages API request. Anthropic refuses unknown fields, so the body is built from the
 * fields it knows rather than passed through; `response_format`, penalties, `seed` and `logprobs` have no
 * counterpart and are dropped. `n` above 1 cannot be served and is refused.
 */
export function toAnthropicRequest({ model, body, stream, maxTokens }: UpstreamParams): {
  payload: MessagesRequest;
  hiddenPromptTokens: number;
} {
  if ((body.n ?? 1) > 1) throw invalid("n above 1 is not supported for this model");
  const caps = claudeCapabilities(model.upstreamModel);
  const { system, turns } = toAnthropicMessages(body.messages as ChatMessage[]);
  const payload: MessagesRequest = { model: model.upstreamModel, max_tokens: maxTokens, messages: turns.map(compact) };
  if (system.length > 0) payload.system = system;
  if (stream) payload.stream = true;

  const stop = typeof body.stop === "string" ? [body.stop] : Array.isArray(body.stop) ? body.stop.filter((s) => typeof s === "string") : [];
  if (stop.length > 0) payload.stop_sequences = stop;

  const tools = toAnthropicTools(body.tools);
  if (tools) {
    payload.tools = tools;
    const choice = toAnthropicToolChoice(body.tool_choice, body.parallel_tool_calls);
    if (choice) payload.tool_choice = choice;
  }

  const { thinking, effort } = thinkingParams(body, caps, maxTokens);
  if (thinking) payload.thinking = thinking;
  if (effort) payload.output_config = { effort };

  // Sampling: Anthropic's temperature range is 0–1 (OpenAI's 0–2, clamped); thinking allows only temperature 1
  // and top_p ≥ 0.95 and no top_k; models from 4.7 on refuse all three. What does not fit is left out, so the
  // request still succeeds with the model's defaults.
  if (caps.sampling) {
    if (typeof body.temperature === "number" && (!thinking || body.temperature === 1)) payload.temperature = Math.min(body.temperature, 1);
    if (typeof body.top_p === "number" && (!thinking || body.top_p >= 0.95)) payload.top_p = body.top_p;
    if (typeof body.top_k === "number" && !thinking) payload.top_k = body.top_k;
  }

  if (typeof body.user === "string" && body.user.length > 0) payload.metadata = { user_id: body.user.slice(0, 256) };
  return { payload, hiddenPromptTokens: tools ? TOOL_SYSTEM_PROMPT_TOKENS : 0 };
}
