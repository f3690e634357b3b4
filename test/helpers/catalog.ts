/** The provider key of the stand-ins (the catalog reads it from `STANDIN_KEY`); they refuse any other. */
export const STANDIN_KEY = "standin-key";

/** A catalog provider for a stand-in at `baseUrl` speaking `type`'s wire format. */
export function standinProvider(baseUrl: string, type: "openai" | "anthropic" = "openai") {
  return { type, baseUrl, apiKeyEnv: "STANDIN_KEY" };
}

/**
 * A catalog model at the tests' round prices: billed 2.5 and 10 USD per 1M prompt and completion tokens (what
 * expectedCharge computes), cost 2 and 8; a context of 128k and 4,096 output tokens.
 */
export function catalogModel(provider: string, upstreamModel: string, extra: Record<string, unknown> = {}) {
  return {
    id: `${provider}/${upstreamModel}`,
    provider,
    upstreamModel,
    name: upstreamModel,
    contextLength: 128_000,
    maxOutputTokens: 4096,
    promptPricePer1MTokens: 2.5,
    completionPricePer1M: 10,
    costPromptPer1M: 2,
    costCompletionPer1M: 8,
    ...extra,
  };
}
