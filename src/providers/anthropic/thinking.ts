import type { ChatRequest } from "../types.ts";
import type { ClaudeCapabilities } from "./models.ts";
import type { ThinkingConfig } from "./wire.ts";

// reasoning_effort → a share of max_tokens as thinking budget, as OpenRouter documents it, within Anthropic's
// floor (1,024) and a ceiling past which a budget rarely helps (32,000).
const EFFORT_SHARE: Record<string, number> = { minimal: 0, low: 0.2, medium: 0.5, high: 0.8, xhigh: 0.8 };
const MIN_BUDGET = 1024;
const MAX_BUDGET = 32_000;
// The adaptive form takes an effort level itself; "minimal" has no match and is the lowest, "xhigh" only exists
// from 4.7 on, so it is sent as the level every adaptive model knows.
const ADAPTIVE_EFFORT: Record<string, string> = { minimal: "low", low: "low", medium: "medium", high: "high", xhigh: "high" };

function budgetFor(effort: string, maxTokens: number): number | undefined {
  if (!Object.hasOwn(EFFORT_SHARE, effort)) return undefined; // "constructor" is not an effort level
  const share = EFFORT_SHARE[effort]!;
  const budget = Math.min(MAX_BUDGET, Math.max(MIN_BUDGET, Math.floor(maxTokens * share)));
  // Anthropic needs budget < max_tokens (max_tokens counts thinking too); raising max_tokens would outgrow the
  // hold, so a max_tokens too small for the smallest budget means no thinking.
  return budget < maxTokens ? budget : undefined;
}

/**
 * A client's own thinking budget within the max_tokens that goes upstream: Anthropic needs budget < max_tokens, and
 * the gateway may have lowered max_tokens to the model's maximum (Claude Code asks 32,000 with a 31,999 budget of
 * every model). Lowered to fit, or undefined (no thinking) where even the smallest budget does not.
 */
export function fittedBudget(budget: number, maxTokens: number): number | undefined {
  if (budget < maxTokens) return budget;
  return maxTokens - 1 >= MIN_BUDGET ? maxTokens - 1 : undefined;
}

/**
 * `thinking` and `reasoning_effort` → Anthropic's thinking, as far as the model takes it. An explicit `thinking`
 * wins: the budget form goes through where the model has it, becomes adaptive where only that exists (4.7 on).
 * `reasoning_effort` becomes adaptive thinking with that effort where the model has it, else a budget from
 * max_tokens. "none", `thinking.type: "disabled"` and models without thinking send nothing: thinking is then
 * off (or the model's default where it is always on).
 */
export function thinkingParams(
  body: ChatRequest,
  caps: ClaudeCapabilities,
  maxTokens: number,
): { thinking?: ThinkingConfig; effort?: string } {
  const effort = typeof body.reasoning_effort === "string" ? body.reasoning_effort : undefined;
  // Anthropic's own thinking shape, as an extension of the OpenAI request; checked field by field below.
  const asked = body.thinking as { type?: string; budget_tokens?: number } | undefined;
  const adaptiveEffort = effort && Object.hasOwn(ADAPTIVE_EFFORT, effort) ? ADAPTIVE_EFFORT[effort] : undefined;
  if (asked && typeof asked === "object") {
    if (asked.type === "enabled" || asked.type === "adaptive") {
      const budget = asked.budget_tokens;
      if (asked.type === "enabled" && caps.budgetThinking && Number.isSafeInteger(budget)) {
        const fitted = fittedBudget(budget as number, maxTokens);
        return fitted ? { thinking: { type: "enabled", budget_tokens: fitted } } : {};
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
