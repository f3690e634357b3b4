/**
 * A catalog model's price cards: the fields the catalog file gives (USD per 1M tokens, as listed) scaled once to
 * integer pico-USD per token, the optional long-context tier and the checks that keep a hold above any charge.
 */

/** A catalog problem, named by the path of the offending field. */
export class CatalogError extends Error {}

const PICO = 1_000_000;

/** USD per 1M tokens as listed → integer pico-USD per token (at most 6 decimals). */
function toPico(value: unknown, where: string): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw new CatalogError(`${where} must be a non-negative number (USD per 1M tokens)`);
  }
  const pico = Math.round(value * PICO);
  if (Math.abs(pico - value * PICO) > 1e-6) throw new CatalogError(`${where} has more than 6 decimals`);
  return pico;
}

/** A positive safe integer, or a CatalogError naming where. */
export function positiveInt(value: unknown, where: string): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value <= 0) {
    throw new CatalogError(`${where} must be a positive integer`);
  }
  return value;
}

/**
 * One price card of a model. Prices are kept as integer "pico-USD per token" (USD per 1M tokens × 10^6) so that
 * every charge is integer arithmetic.
 */
export interface Prices {
  /** USD per 1M tokens, as listed (for /v1/models). */
  promptPricePer1MTokens: number;
  completionPricePer1M: number;
  promptPico: number;
  completionPico: number;
  costPromptPico: number;
  costCompletionPico: number;
  /** Cache prices as listed (USD per 1M tokens), shown on /v1/models under these names; absent: the prompt price. */
  cachedPromptPricePer1M?: number;
  cacheWritePricePer1M?: number;
  cacheWrite1hPricePer1M?: number;
  /** Cache reads, 5-minute and 1-hour cache writes, billed and cost (tariff/charge.ts); absent: the prompt's. */
  cachedPromptPico?: number;
  cacheWritePico?: number;
  cacheWrite1hPico?: number;
  costCachedPromptPico?: number;
  costCacheWritePico?: number;
  costCacheWrite1hPico?: number;
}

/**
 * A long-context tier (catalog `longContext`): a request whose prompt is longer than `aboveTokens` (cache reads and
 * writes included) is billed at these prices for every token, prompt and completion, as OpenAI bills its GPT-6
 * family above 272K input tokens and Anthropic its 1M-context models above 200K. No price of it is below the base
 * card's (checked at load), which keeps a hold taken at the tier of the prompt's upper bound above any charge.
 */
export interface LongContext extends Prices {
  aboveTokens: number;
}

/** The optional cache prices of a catalog model: its field → the Model's pico field (billed, then cost side). */
export const CACHE_PRICES = [
  ["cachedPromptPricePer1M", "cachedPromptPico"],
  ["cacheWritePricePer1M", "cacheWritePico"],
  ["cacheWrite1hPricePer1M", "cacheWrite1hPico"],
  ["costCachedPromptPer1M", "costCachedPromptPico"],
  ["costCacheWritePer1M", "costCacheWritePico"],
  ["costCacheWrite1hPer1M", "costCacheWrite1hPico"],
] as const;

/** A price card's fields from the catalog: the four prices it must have and the cache prices it may (as listed too). */
export function prices(m: Record<string, unknown>, at: string): Prices {
  const card: Prices = {
    promptPricePer1MTokens: m.promptPricePer1MTokens as number,
    completionPricePer1M: m.completionPricePer1M as number,
    promptPico: toPico(m.promptPricePer1MTokens, `${at}.promptPricePer1MTokens`),
    completionPico: toPico(m.completionPricePer1M, `${at}.completionPricePer1M`),
    costPromptPico: toPico(m.costPromptPer1M, `${at}.costPromptPer1M`),
    costCompletionPico: toPico(m.costCompletionPer1M, `${at}.costCompletionPer1M`),
  };
  // Scaled once here: every charge is integer arithmetic on them (tariff/charge.ts).
  for (const [field, pico] of CACHE_PRICES) {
    if (m[field] === undefined || m[field] === null) continue;
    card[pico] = toPico(m[field], `${at}.${field}`);
    if (field.endsWith("PricePer1M")) card[field as "cachedPromptPricePer1M"] = m[field] as number;
  }
  return card;
}

/** Each pico rate of a card, a cache price it leaves out read as its prompt price (as tariff/charge.ts bills it). */
function rates(c: Prices): Record<string, number> {
  return {
    promptPricePer1MTokens: c.promptPico,
    completionPricePer1M: c.completionPico,
    costPromptPer1M: c.costPromptPico,
    costCompletionPer1M: c.costCompletionPico,
    cachedPromptPricePer1M: c.cachedPromptPico ?? c.promptPico,
    cacheWritePricePer1M: c.cacheWritePico ?? c.promptPico,
    cacheWrite1hPricePer1M: c.cacheWrite1hPico ?? c.promptPico,
    costCachedPromptPer1M: c.costCachedPromptPico ?? c.costPromptPico,
    costCacheWritePer1M: c.costCacheWritePico ?? c.costPromptPico,
    costCacheWrite1hPer1M: c.costCacheWrite1hPico ?? c.costPromptPico,
  };
}

/** A model's `longContext` tier: above a prompt length within the context window, no price below the base card's. */
export function longContext(value: unknown, base: Prices, contextLength: number, at: string): LongContext | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "object") throw new CatalogError(`${at} must be an object {aboveTokens, prices}`);
  const raw = value as Record<string, unknown>;
  const aboveTokens = positiveInt(raw.aboveTokens, `${at}.aboveTokens`);
  if (aboveTokens >= contextLength) throw new CatalogError(`${at}.aboveTokens must be below the contextLength (${contextLength})`);
  const tier = { aboveTokens, ...prices(raw, at) };
  const [baseRates, tierRates] = [rates(base), rates(tier)];
  for (const [field, rate] of Object.entries(tierRates))
    if (rate < baseRates[field]!) throw new CatalogError(`${at}.${field} is below the model's own: a longer prompt never costs less`);
  return tier;
}

/** A long-context tier as /v1/models lists it: its threshold and its billed prices, named as in the catalog. */
export function listedTier(t: LongContext) {
  return {
    aboveTokens: t.aboveTokens,
    promptPricePer1MTokens: t.promptPricePer1MTokens,
    completionPricePer1M: t.completionPricePer1M,
    ...(t.cachedPromptPricePer1M !== undefined && { cachedPromptPricePer1M: t.cachedPromptPricePer1M }),
    ...(t.cacheWritePricePer1M !== undefined && { cacheWritePricePer1M: t.cacheWritePricePer1M }),
    ...(t.cacheWrite1hPricePer1M !== undefined && { cacheWrite1hPricePer1M: t.cacheWrite1hPricePer1M }),
  };
}
