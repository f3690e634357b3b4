import { ApiError } from "../../errors.ts";
import type { UpstreamParams } from "../types.ts";
import { claudeCapabilities, type ClaudeCapabilities } from "./models.ts";

type Block = Record<string, unknown>;
interface Turn {
  role: "user" | "assistant";
  content: Block[];
}
type Msg = Record<string, unknown>;

function invalid(message: string): ApiError {
  return new ApiError({ code: "VALIDATION_ERROR", message });
}

// Anthropic refuses empty text blocks, so empty strings are dropped rather than sent.
function textBlock(text: string): Block[] {
  return text.length > 0 ? [{ type: "text", text }] : [];
}

const DATA_URL = /^data:([\w.+-]+\/[\w.+-]+);base64,(.*)$/s;

function imageBlock(part: Block, where: string): Block {
  const url = (part.image_url as { url?: unknown } | undefined)?.url;
  if (typeof url !== "string") throw invalid(`${where}.image_url.url must be a string`);
  const data = DATA_URL.exec(url);
  if (data) return { type: "image", source: { type: "base64", media_type: data[1], data: data[2] } };
  return { type: "image", source: { type: "url", url } };
}

function contentBlocks(content: unknown, where: string, images: boolean): Block[] {
  if (content === null || content === undefined) return [];
  if (typeof content === "string") return textBlock(content);
  const blocks: Block[] = [];
  (content as Block[]).forEach((part, i) => {
    if (part?.type === "text" && typeof part.text === "string") blocks.push(...textBlock(part.text));
    else if (part?.type === "image_url" && images) blocks.push(imageBlock(part, `${where}[${i}]`));
    else throw invalid(`${where}[${i}]: content part type "${String(part?.type)}" is not supported for this model`);
  });
  return blocks;
}

// A tool result may only carry text and images.
function toolResultContent(content: unknown, where: string): string | Block[] {
  if (typeof content === "string") return content;
  return contentBlocks(content, where, true);
}

function toolUseBlocks(calls: unknown, where: string): Block[] {
  if (!Array.isArray(calls)) return [];
  return calls.map((c: { id?: unknown; function?: { name?: unknown; arguments?: unknown } }, i) => {
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
function thinkingBlocks(blocks: unknown): Block[] {
  if (!Array.isArray(blocks)) return [];
  const out: Block[] = [];
  for (const b of blocks as Block[]) {
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
export function toAnthropicMessages(messages: Msg[]): { system: Block[]; turns: Turn[] } {
  const system: Block[] = [];
  const turns: Turn[] = [];
  const push = (role: Turn["role"], blocks: Block[]) => {
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
        const block: Block = { type: "tool_result", tool_use_id: m.tool_call_id };
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
function compact(turn: Turn): { role: string; content: string | Block[] } {
  const only = turn.content.length === 1 ? turn.content[0] : undefined;
  if (only?.type === "text" && Object.keys(only).length === 2) return { role: turn.role, content: only.text as string };
  return turn;
}

function toAnthropicTools(tools: unknown): Block[] | undefined {
  if (!Array.isArray(tools) || tools.length === 0) return undefined;
  return tools.map((t: { type?: unknown; function?: { name?: unknown; description?: unknown; parameters?: unknown } }, i) => {
    if (t?.type !== "function" || typeof t.function?.name !== "string") {
      throw invalid(`tools[${i}]: only function tools with a name are supported for this model`);
    }
    const tool: Block = { name: t.function.name, input_schema: t.function.parameters ?? { type: "object", properties: {} } };
    if (typeof t.function.description === "string") tool.description = t.function.description;
    return tool;
  });
}

function toAnthropicToolChoice(choice: unknown, parallel: unknown): Block | undefined {
  let out: Block | undefined;
  if (choice === "auto") out = { type: "auto" };
  else if (choice === "none") out = { type: "none" };
  else if (choice === "required") out = { type: "any" };
  else if (choice && typeof choice === "object") {
    const name = (choice as { function?: { name?: unknown } }).function?.name;
    if (typeof name !== "string") throw invalid("tool_choice.function.name must be a string");
    out = { type: "tool", name };
  } else if (choice !== undefined) throw invalid('tool_choice must be "auto", "none", "required" or a function');
  if (parallel === false && out?.type !== "none") out = { ...(out ?? { type: "auto" }), disable_parallel_tool_use: true };
  return out;
}

// reasoning_effort → a share of max_tokens as thinking budget, as OpenRouter documents it, within Anthropic's
// floor (1,024) and a ceiling past which a budget rarely helps (32,000).
const EFFORT_SHARE: Record<string, number> = { minimal: 0, low: 0.2, medium: 0.5, high: 0.8, xhigh: 0.8 };
const MIN_BUDGET = 1024;
const MAX_BUDGET = 32_000;
// The adaptive form takes an effort level itself; "minimal" has no match and is the lowest, "xhigh" only exists
// from 4.7 on, so it is sent as the level every adaptive model knows.
const ADAPTIVE_EFFORT: Record<string, string> = { minimal: "low", low: "low", medium: "medium", high: "high", xhigh: "high" };

function budgetFor(effort: string, maxTokens: number): number | undefined {
  const share = EFFORT_SHARE[effort];
  if (share === undefined) return undefined;
  const budget = Math.min(MAX_BUDGET, Math.max(MIN_BUDGET, Math.floor(maxTokens * share)));
  // Anthropic needs budget < max_tokens (max_tokens counts thinking too); raising max_tokens would outgrow the
  // hold, so a max_tokens too small for the smallest budget means no thinking.
  return budget < maxTokens ? budget : undefined;
}

/**
 * `thinking` and `reasoning_effort` → Anthropic's thinking, as far as the model takes it. An explicit `thinking`
 * wins: the budget form goes through where the model has it, becomes adaptive where only that exists (4.7 on).
 * `reasoning_effort` becomes adaptive thinking with that effort where the model has it, else a budget from
 * max_tokens. "none", `thinking.type: "disabled"` and models without thinking send nothing: thinking is then
 * off (or the model's default where it is always on).
 */
export function thinkingParams(body: Msg, caps: ClaudeCapabilities, maxTokens: number): { thinking?: Block; effort?: string } {
  const effort = typeof body.reasoning_effort === "string" ? body.reasoning_effort : undefined;
  const asked = body.thinking as { type?: unknown; budget_tokens?: unknown } | undefined;
  const adaptiveEffort = effort ? ADAPTIVE_EFFORT[effort] : undefined;
  if (asked && typeof asked === "object") {
    if (asked.type === "enabled" || asked.type === "adaptive") {
      const budget = asked.budget_tokens;
      if (asked.type === "enabled" && caps.budgetThinking && Number.isSafeInteger(budget)) {
        return { thinking: { type: "enabled", budget_tokens: budget } };
      }
      if (caps.adaptiveThinking) return { thinking: { type: "adaptive" }, effort: adaptiveEffort };
      const fallback = caps.budgetThinking ? budgetFor(effort ?? "medium", maxTokens) : undefined;
      return fallback ? { thinking: { type: "enabled", budget_tokens: fallback } } : {};
    }
    return {};
  }
  if (!effort || effort === "none") return {};
  if (caps.adaptiveThinking && adaptiveEffort) return { thinking: { type: "adaptive" }, effort: adaptiveEffort };
  const budget = caps.budgetThinking ? budgetFor(effort, maxTokens) : undefined;
  return budget ? { thinking: { type: "enabled", budget_tokens: budget } } : {};
}

// With tools, Anthropic adds a tool-use system prompt the body does not show: 159–530 tokens by model and
// tool_choice in its documentation, so 600 covers every model.
const TOOL_SYSTEM_PROMPT_TOKENS = 600;

/**
 * The OpenAI request → a Messages API request. Anthropic refuses unknown fields, so the body is built from the
 * fields it knows rather than passed through; `response_format`, penalties, `seed` and `logprobs` have no
 * counterpart and are dropped. `n` above 1 cannot be served and is refused.
 */
export function toAnthropicRequest({ model, body, stream, maxTokens }: UpstreamParams): { payload: Msg; hiddenPromptTokens: number } {
  if ((body.n ?? 1) > 1) throw invalid("n above 1 is not supported for this model");
  const caps = claudeCapabilities(model.upstreamModel);
  const { system, turns } = toAnthropicMessages(body.messages as Msg[]);
  const payload: Msg = { model: model.upstreamModel, max_tokens: maxTokens, messages: turns.map(compact) };
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
