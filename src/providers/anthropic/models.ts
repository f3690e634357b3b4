/** What a Claude model accepts for reasoning and sampling; decided by its name since the catalog does not say. */
export interface ClaudeCapabilities {
  /** `thinking: {type: "enabled", budget_tokens}` (3.7 up to 4.6). */
  budgetThinking: boolean;
  /** `thinking: {type: "adaptive"}` with `output_config.effort` (4.6 on). */
  adaptiveThinking: boolean;
  /** temperature, top_p and top_k; from 4.7 on they are refused. */
  sampling: boolean;
}

// Old names put the version first (claude-3-7-sonnet-20250219), new ones the tier first (claude-opus-4-7,
// claude-sonnet-4-20250514, claude-haiku-4-5-20251001): a minor version is 1–2 digits, a date snapshot is 8.
const OLD_NAME = /^claude-(\d+)(?:-(\d))?-(?:opus|sonnet|haiku|instant)/;
const NEW_NAME = /^claude-[a-z]+-(\d+)(?:-(\d{1,2}))?(?=-|@|$)/;

// major × 100 + minor, so that versions compare as integers (4.6 → 406, 4.10 would be 410).
function version(upstreamModel: string): number | null {
  const m = OLD_NAME.exec(upstreamModel) ?? NEW_NAME.exec(upstreamModel);
  if (!m) return null;
  return Number(m[1]) * 100 + Number(m[2] ?? 0);
}

/**
 * Capabilities by model version: thinking arrived with 3.7 (budget form), 4.6 added the adaptive form and
 * deprecated the budget one, 4.7 and later take only adaptive thinking and refuse sampling parameters. A name
 * without a version (a proxy's alias) is treated as a budget-thinking model that takes sampling parameters,
 * which is what every Claude model from 3.7 to 4.5 accepts.
 */
export function claudeCapabilities(upstreamModel: string): ClaudeCapabilities {
  const v = version(upstreamModel);
  if (v === null) return { budgetThinking: true, adaptiveThinking: false, sampling: true };
  return {
    budgetThinking: v >= 307 && v < 407,
    adaptiveThinking: v >= 406,
    sampling: v < 407,
  };
}
