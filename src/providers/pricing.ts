import type { Model } from "./catalog.ts";

/** Token counts as providers report them. */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
}

// Prices are pico-USD per token, so a product is at most ~1e7 tokens × ~1e9 = 1e16 > 2^53.
// BigInt keeps the rounding exact for any input; it only runs twice per request.
function ceilMicro(promptTokens: number, promptPico: number, completionTokens: number, completionPico: number): number {
  const pico = BigInt(promptTokens) * BigInt(promptPico) + BigInt(completionTokens) * BigInt(completionPico);
  return Number((pico + 999_999n) / 1_000_000n);
}

/** What the wallet pays, in µUSDC: ceil(prompt × price + completion × price). */
export function billedMicro(model: Model, u: Usage): number {
  return ceilMicro(u.prompt_tokens, model.promptPico, u.completion_tokens, model.completionPico);
}

/** What the provider costs us, in µUSD (for platform revenue). */
export function costMicro(model: Model, u: Usage): number {
  return ceilMicro(u.prompt_tokens, model.costPromptPico, u.completion_tokens, model.costCompletionPico);
}
