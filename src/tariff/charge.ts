import type { Model } from "../providers/catalog.ts";
import type { Usage } from "../providers/types.ts";

// Prices are pico-USD per token, so a product can reach ~1e7 tokens × ~1e9 = 1e16 > 2^53. Doubles are exact
// while every term stays a safe integer (the common case, and the cheap one); beyond that BigInt is.
function ceilMicro(promptTokens: number, promptPico: number, completionTokens: number, completionPico: number): number {
  const pico = promptTokens * promptPico + completionTokens * completionPico;
  if (pico <= Number.MAX_SAFE_INTEGER) {
    const rest = pico % 1_000_000;
    return (pico - rest) / 1_000_000 + (rest > 0 ? 1 : 0);
  }
  const big = BigInt(promptTokens) * BigInt(promptPico) + BigInt(completionTokens) * BigInt(completionPico);
  return Number((big + 999_999n) / 1_000_000n);
}

/** What the wallet pays, in µUSDC: ceil(prompt × price + completion × price). */
export function billedMicro(model: Model, u: Usage): number {
  return ceilMicro(u.prompt_tokens, model.promptPico, u.completion_tokens, model.completionPico);
}

/** What the provider costs us, in µUSD (for platform revenue). */
export function costMicro(model: Model, u: Usage): number {
  return ceilMicro(u.prompt_tokens, model.costPromptPico, u.completion_tokens, model.costCompletionPico);
}
