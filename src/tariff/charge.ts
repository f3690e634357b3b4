import type { Model, Prices } from "../providers/catalog.ts";
import type { Usage } from "../providers/types.ts";

/** A model's rates on one side (what the wallet pays, or what the provider costs us), pico-USD per token. */
interface Rates {
  prompt: number;
  cachedPrompt: number;
  cacheWrite: number;
  cacheWrite1h: number;
  completion: number;
}

/** What the wallet pays per token; a cache price the catalog leaves out is the prompt price. */
export function billedRates(m: Prices): Rates {
  return {
    prompt: m.promptPico,
    cachedPrompt: m.cachedPromptPico ?? m.promptPico,
    cacheWrite: m.cacheWritePico ?? m.promptPico,
    cacheWrite1h: m.cacheWrite1hPico ?? m.promptPico,
    completion: m.completionPico,
  };
}

/** What the provider costs us per token; a cache cost the catalog leaves out is the prompt cost. */
export function costRates(m: Prices): Rates {
  return {
    prompt: m.costPromptPico,
    cachedPrompt: m.costCachedPromptPico ?? m.costPromptPico,
    cacheWrite: m.costCacheWritePico ?? m.costPromptPico,
    cacheWrite1h: m.costCacheWrite1hPico ?? m.costPromptPico,
    completion: m.costCompletionPico,
  };
}

/**
 * The price card a request of `promptTokens` is billed at: the long-context tier's above its threshold (catalog
 * `longContext`), for every token of the request, else the model's own.
 */
export function pricesFor(model: Model, promptTokens: number): Prices {
  const tier = model.longContext;
  return tier && promptTokens > tier.aboveTokens ? tier : model;
}

const n = (v: number | undefined) => v ?? 0;

/**
 * ceil(Σ tokens × pico / 1e6) over the usage's parts, in µ: the uncached prompt, cache reads, 5-minute and 1-hour
 * cache writes, the completion; one ceiling over all of them. Prices are pico-USD per token, so a product can reach
 * ~1e7 tokens × ~1e9 = 1e16 > 2^53. Every term is non-negative, so a double sum that stays a safe integer had
 * exact terms (the common case, and the cheap one); beyond that BigInt is exact.
 */
function ceilMicro(u: Usage, r: Rates): number {
  const cached = n(u.cached_prompt_tokens);
  const write = n(u.cache_write_tokens);
  const write1h = n(u.cache_write_1h_tokens);
  const uncached = Math.max(0, u.prompt_tokens - cached - write - write1h);
  const pico =
    uncached * r.prompt + cached * r.cachedPrompt + write * r.cacheWrite + write1h * r.cacheWrite1h + u.completion_tokens * r.completion;
  if (pico <= Number.MAX_SAFE_INTEGER) {
    const rest = pico % 1_000_000;
    return (pico - rest) / 1_000_000 + (rest > 0 ? 1 : 0);
  }
  const big =
    BigInt(uncached) * BigInt(r.prompt) +
    BigInt(cached) * BigInt(r.cachedPrompt) +
    BigInt(write) * BigInt(r.cacheWrite) +
    BigInt(write1h) * BigInt(r.cacheWrite1h) +
    BigInt(u.completion_tokens) * BigInt(r.completion);
  return Number((big + 999_999n) / 1_000_000n);
}

/**
 * What the wallet pays, in µUSDC: ceil(uncached prompt × prompt price + cache reads × cached price + 5-minute writes
 * × write price + 1-hour writes × 1-hour write price + completion × completion price). Without cache tokens (or
 * cache prices) that is ceil(prompt × price + completion × price).
 */
export function billedMicro(model: Model, u: Usage): number {
  return ceilMicro(u, billedRates(pricesFor(model, u.prompt_tokens)));
}

/** What the provider costs us, in µUSD (for platform revenue), at the cost-side rates. */
export function costMicro(model: Model, u: Usage): number {
  return ceilMicro(u, costRates(pricesFor(model, u.prompt_tokens)));
}

/**
 * The highest prompt rate (pico per token) a request can be billed at: the prompt price or a cache read's (OpenAI
 * caches on its own), and, when the request can write to the cache (`mayWriteCache`), the write prices. The hold
 * takes every prompt token at it, so whatever split the provider reports, the charge stays within the hold. `card`:
 * the price card of the prompt's upper bound (pricesFor), whose prices are no lower than a shorter prompt's.
 */
export function holdPromptPico(card: Prices, mayWriteCache: boolean): number {
  const r = billedRates(card);
  const read = Math.max(r.prompt, r.cachedPrompt);
  return mayWriteCache ? Math.max(read, r.cacheWrite, r.cacheWrite1h) : read;
}

/**
 * The hold's µUSDC: every prompt token at holdPromptPico, the completion at its price (one ceiling), both from the
 * price card of `promptTokens`, the prompt's upper bound: a long-context tier when it passes the tier's threshold.
 */
export function holdMicro(model: Model, promptTokens: number, completionTokens: number, mayWriteCache: boolean): number {
  const card = pricesFor(model, promptTokens);
  const prompt = holdPromptPico(card, mayWriteCache);
  const rates = { prompt, cachedPrompt: prompt, cacheWrite: prompt, cacheWrite1h: prompt, completion: card.completionPico };
  return ceilMicro({ prompt_tokens: promptTokens, completion_tokens: completionTokens }, rates);
}
