/**
 * The tariff (src/tariff/) as one table: what a request may not carry, the hold that bounds it, the charge of each
 * usage shape (cache reads, 5-minute and 1-hour writes, both sides of the price), what each way a request ends is
 * billed at, and the provider usage fields the charge is read from. Pure functions, no service. Then the built-in
 * catalog's cache prices against the providers' published ratios (docs/catalog.md).
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ApiError } from "../src/errors.ts";
import { usageOf as anthropicUsage } from "../src/providers/anthropic/chatResponse.ts";
import { CatalogError, parseCatalog, type Model } from "../src/providers/catalog.ts";
import { usageOf as openaiUsage } from "../src/providers/openai/stream.ts";
import type { ChatRequest, Usage } from "../src/providers/types.ts";
import {
  billedMicro,
  costMicro,
  holdMicro,
  holdPromptPico,
  outcomeUsage,
  refuseRepricingFields,
  reserveFor,
  type ReserveBound,
} from "../src/tariff/index.ts";
import { mayWriteCache } from "../src/tariff/hold.ts";

const CACHE_PRICES = {
  cachedPromptPricePer1M: 0.3,
  cacheWritePricePer1M: 3.75,
  cacheWrite1hPricePer1M: 6,
  costCachedPromptPer1M: 0.25,
  costCacheWritePer1M: 3.125,
  costCacheWrite1hPer1M: 5,
};
// A long-context tier above 100 prompt tokens: every price twice the base card's, the completion's 1.5×.
const LONG = {
  aboveTokens: 100,
  promptPricePer1MTokens: 6,
  completionPricePer1M: 22.5,
  costPromptPer1M: 5,
  costCompletionPer1M: 18.75,
  cachedPromptPricePer1M: 0.6,
  cacheWritePricePer1M: 7.5,
  cacheWrite1hPricePer1M: 12,
  costCachedPromptPer1M: 0.5,
  costCacheWritePer1M: 6.25,
  costCacheWrite1hPer1M: 10,
};
const PROVIDERS = { p: { type: "anthropic", baseUrl: "http://127.0.0.1:9" } };
const BASE_PRICES = { promptPricePer1MTokens: 3, completionPricePer1M: 15, costPromptPer1M: 2.5, costCompletionPer1M: 12.5 };
const catalogModel = (id: string, extra: Record<string, unknown> = {}) => ({
  id,
  provider: "p",
  upstreamModel: "m",
  name: "m",
  contextLength: 200_000,
  maxOutputTokens: 64_000,
  ...BASE_PRICES,
  ...extra,
});
const catalog = parseCatalog(
  {
    providers: PROVIDERS,
    models: [
      catalogModel("p/plain"),
      catalogModel("p/cached", CACHE_PRICES),
      catalogModel("p/tiered", { ...CACHE_PRICES, longContext: LONG }),
    ],
  },
  {},
);
const plain = catalog.models.get("p/plain")!;
const cached = catalog.models.get("p/cached")!;
const tiered = catalog.models.get("p/tiered")!;
const catalogError = (longContext: Record<string, unknown>) => {
  try {
    parseCatalog({ providers: PROVIDERS, models: [catalogModel("p/t", { ...CACHE_PRICES, longContext })] }, {});
    return "accepted";
  } catch (e) {
    return e instanceof CatalogError ? e.message : String(e);
  }
};

const usage = (prompt: number, completion: number, cache: Partial<Usage> = {}): Usage => ({
  prompt_tokens: prompt,
  completion_tokens: completion,
  ...cache,
});
// An upstream body of exactly 100 bytes (a prompt bound of 108 tokens), with a cache_control key or without.
const body100 = (extra: Record<string, unknown> = {}) => {
  const base = JSON.stringify({ ...extra, x: "" });
  return JSON.stringify({ ...extra, x: "a".repeat(100 - base.length) });
};
const request = { model: "p/cached", messages: [{ role: "user", content: "hi" }] } as ChatRequest;
const hold = (m: Model, upstream: string) => reserveFor(m, request, upstream, 0, 10).micro;
const bound = { promptTokens: 108, completionTokens: 10 } as ReserveBound;
const counted = usage(50, 3, { cached_prompt_tokens: 20 });
const refusal = (body: Record<string, unknown>) => {
  try {
    refuseRepricingFields(body);
    return "accepted";
  } catch (e) {
    return e instanceof ApiError ? `${e.code}: ${e.message}` : String(e);
  }
};

/** [what, actual, expected]: each row one rule of the tariff. */
const TABLE: [string, () => unknown, unknown][] = [
  // What a request may not carry (fields.ts, parts.ts): refused before any hold.
  ["a plain request is accepted", () => refusal({ model: "p/m", messages: [] }), "accepted"],
  [
    "service_tier is refused",
    () => refusal({ model: "p/m", messages: [], service_tier: "priority" }),
    "VALIDATION_ERROR: service_tier is not accepted: it selects the provider's pricing tier (priority processing costs more)",
  ],
  // Prices scaled once at load; absent cache prices are the prompt price.
  [
    "prices scale to pico-USD per token",
    () => [cached.promptPico, cached.cachedPromptPico, cached.cacheWritePico, cached.cacheWrite1hPico],
    [3_000_000, 300_000, 3_750_000, 6_000_000],
  ],
  [
    "a model without cache prices has none",
    () => [plain.cachedPromptPico, plain.cacheWritePico, plain.costCachedPromptPico],
    [undefined, undefined, undefined],
  ],
  // The charge: one ceiling over every part (µUSDC).
  ["no cache: prompt and completion", () => billedMicro(cached, usage(1_000, 100)), 4_500],
  ["cache reads at 0.1×", () => billedMicro(cached, usage(1_000, 100, { cached_prompt_tokens: 800 })), 200 * 3 + 800 * 0.3 + 1_500],
  ["5-minute writes at 1.25×", () => billedMicro(cached, usage(1_000, 0, { cache_write_tokens: 1_000 })), 3_750],
  ["1-hour writes at 2×", () => billedMicro(cached, usage(1_000, 0, { cache_write_1h_tokens: 1_000 })), 6_000],
  [
    "every part together, one ceiling",
    () => billedMicro(cached, usage(1_000, 10, { cached_prompt_tokens: 500, cache_write_tokens: 200, cache_write_1h_tokens: 100 })),
    600 + 150 + 750 + 600 + 150,
  ],
  ["a fraction of a µUSDC rounds up once", () => billedMicro(cached, usage(3, 0, { cached_prompt_tokens: 3 })), 1],
  [
    "the cost side at the cost prices",
    () => costMicro(cached, usage(1_000, 10, { cached_prompt_tokens: 500, cache_write_tokens: 200, cache_write_1h_tokens: 100 })),
    500 + 125 + 625 + 500 + 125,
  ],
  [
    "without cache prices, every prompt token at the prompt price (as before)",
    () => billedMicro(plain, usage(1_000, 10, { cached_prompt_tokens: 500, cache_write_tokens: 200, cache_write_1h_tokens: 100 })),
    3_150,
  ],
  // The hold: the prompt bound at the dearest rate the request can be billed at.
  [
    "a breakpoint is the cache_control key",
    () => [mayWriteCache(body100({ cache_control: { type: "ephemeral" } })), mayWriteCache(body100())],
    [true, false],
  ],
  ["a prompt that only mentions cache_control is no breakpoint", () => mayWriteCache(JSON.stringify({ x: '"cache_control"' })), false],
  [
    "the dearest prompt rate: with a breakpoint the 1-hour write",
    () => [holdPromptPico(cached, true), holdPromptPico(cached, false)],
    [6_000_000, 3_000_000],
  ],
  ["hold without a breakpoint: 108 × 3 + 10 × 15", () => hold(cached, body100()), 474],
  ["hold with a breakpoint: 108 × 6 + 10 × 15", () => hold(cached, body100({ cache_control: { type: "ephemeral" } })), 798],
  ["hold of a model without cache prices, breakpoint or not", () => hold(plain, body100({ cache_control: { type: "ephemeral" } })), 474],
  [
    "the dearest usage a held request can report is within its hold",
    () => billedMicro(cached, usage(108, 10, { cache_write_1h_tokens: 108 })) <= hold(cached, body100({ cache_control: {} })),
    true,
  ],
  // A long-context tier (catalog longContext): past its threshold, every token of the request at its prices.
  ["a prompt of exactly aboveTokens: the model's own prices", () => billedMicro(tiered, usage(100, 10)), 100 * 3 + 10 * 15],
  ["one token more: every token at the tier's, completion too", () => billedMicro(tiered, usage(101, 10)), 101 * 6 + 225],
  ["the tier's cost side", () => costMicro(tiered, usage(101, 10)), Math.ceil(101 * 5 + 10 * 18.75)],
  [
    "cache reads count toward the threshold, at the tier's read price",
    () => billedMicro(tiered, usage(200, 0, { cached_prompt_tokens: 100 })),
    100 * 6 + 100 * 0.6,
  ],
  [
    "the hold takes the tier of the prompt's bound: at, above, above with a breakpoint",
    () => [holdMicro(tiered, 100, 10, false), holdMicro(tiered, 101, 10, false), holdMicro(tiered, 101, 10, true)],
    [450, 101 * 6 + 225, 101 * 12 + 225],
  ],
  [
    "the dearest usage under a bound past the threshold is within its hold",
    () => billedMicro(tiered, usage(150, 10, { cache_write_1h_tokens: 150 })) <= holdMicro(tiered, 150, 10, true),
    true,
  ],
  ["a tier listed as loaded", () => [tiered.longContext?.aboveTokens, tiered.longContext?.promptPico], [100, 6_000_000]],
  [
    "a tier price below the model's own is refused (a hold at the longer prompt's tier must cover a shorter one)",
    () => catalogError({ ...LONG, cachedPromptPricePer1M: 0.2 }),
    "models[0].longContext.cachedPromptPricePer1M is below the model's own: a longer prompt never costs less",
  ],
  [
    "a tier price left out is its prompt price, compared as such",
    () => catalogError({ ...LONG, cacheWrite1hPricePer1M: undefined, promptPricePer1MTokens: 5.9 }),
    "models[0].longContext.cacheWrite1hPricePer1M is below the model's own: a longer prompt never costs less",
  ],
  [
    "a threshold at or past the context window is refused",
    () => catalogError({ ...LONG, aboveTokens: 200_000 }),
    "models[0].longContext.aboveTokens must be below the contextLength (200000)",
  ],
  [
    "a tier without its prices is refused",
    () => catalogError({ aboveTokens: 100 }),
    "models[0].longContext.promptPricePer1MTokens must be a non-negative number (USD per 1M tokens)",
  ],
  // What each way a request ends is billed at.
  ["usage reported: the provider's", () => outcomeUsage("reported", { reported: usage(9, 9), counted, bound }), usage(9, 9)],
  ["usage counted: the gateway's count", () => outcomeUsage("counted", { counted, bound }), counted],
  ["client gone while reading: what it got", () => outcomeUsage("client_gone", { counted, reading: true, bound }), counted],
  [
    "client gone, not reading: the completion bound",
    () => outcomeUsage("client_gone", { counted, reading: false, bound }),
    { ...counted, completion_tokens: 10 },
  ],
  [
    "time cap, not reading: the completion bound",
    () => outcomeUsage("time_cap", { counted, reading: false, bound }),
    { ...counted, completion_tokens: 10 },
  ],
  ["failure: nothing", () => outcomeUsage("failed", { reported: usage(9, 9), counted, bound }), null],
  // The provider fields the charge reads.
  [
    "OpenAI: cached_tokens, part of prompt_tokens",
    () => openaiUsage({ prompt_tokens: 11, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 8 } }),
    usage(11, 5, { cached_prompt_tokens: 8 }),
  ],
  [
    "DeepSeek: prompt_cache_hit_tokens",
    () => openaiUsage({ prompt_tokens: 11, completion_tokens: 5, prompt_cache_hit_tokens: 8 }),
    usage(11, 5, { cached_prompt_tokens: 8 }),
  ],
  [
    "OpenAI: cache_write_tokens (the GPT-6 family writes unasked), part of prompt_tokens",
    () => openaiUsage({ prompt_tokens: 11, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 2, cache_write_tokens: 8 } }),
    usage(11, 5, { cached_prompt_tokens: 2, cache_write_tokens: 8 }),
  ],
  [
    "OpenAI: writes past what the reads leave of the prompt count as the rest",
    () => openaiUsage({ prompt_tokens: 11, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 9, cache_write_tokens: 8 } }),
    usage(11, 5, { cached_prompt_tokens: 9, cache_write_tokens: 2 }),
  ],
  [
    "cached tokens above the prompt count as the prompt",
    () => openaiUsage({ prompt_tokens: 11, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 99 } }),
    usage(11, 5, { cached_prompt_tokens: 11 }),
  ],
  [
    "Anthropic: input_tokens excludes reads and writes; without cache_creation all writes are 5-minute",
    () => anthropicUsage({ input_tokens: 10, cache_read_input_tokens: 40, cache_creation_input_tokens: 12, output_tokens: 6 }),
    usage(62, 6, { cached_prompt_tokens: 40, cache_write_tokens: 12 }),
  ],
  [
    "Anthropic: cache_creation splits the writes by lifetime",
    () =>
      anthropicUsage({
        input_tokens: 10,
        cache_read_input_tokens: 40,
        cache_creation_input_tokens: 12,
        cache_creation: { ephemeral_5m_input_tokens: 4, ephemeral_1h_input_tokens: 8 },
        output_tokens: 6,
      }),
    usage(62, 6, { cached_prompt_tokens: 40, cache_write_tokens: 4, cache_write_1h_tokens: 8 }),
  ],
  ["Anthropic: no cache, no split", () => anthropicUsage({ input_tokens: 10, output_tokens: 6 }), usage(10, 6)],
];

describe("the tariff, one table", () => {
  for (const [what, actual, expected] of TABLE) test(what, () => expect(actual()).toEqual(expected));
});

describe("the built-in catalog's cache prices (config/models.json, docs/catalog.md)", () => {
  const raw = JSON.parse(readFileSync(join(import.meta.dir, "..", "config", "models.json"), "utf8")) as {
    models: Record<string, any>[];
  };
  const near = (a: number, b: number) => Math.abs(a - b) < 1e-9;

  test("Anthropic: reads 0.1×, 5-minute writes 1.25×, 1-hour writes 2× the input price, billed and cost", () => {
    const claude = raw.models.filter((m) => m.provider === "anthropic");
    expect(claude.length).toBeGreaterThan(0);
    for (const m of claude) {
      for (const [input, read, write, write1h] of [
        [m.promptPricePer1MTokens, m.cachedPromptPricePer1M, m.cacheWritePricePer1M, m.cacheWrite1hPricePer1M],
        [m.costPromptPer1M, m.costCachedPromptPer1M, m.costCacheWritePer1M, m.costCacheWrite1hPer1M],
      ]) {
        expect([m.id, near(read, input * 0.1), near(write, input * 1.25), near(write1h, input * 2)]).toEqual([m.id, true, true, true]);
      }
    }
  });

  test("every cache price is billed at 1.2× its cost, like the rest of the catalog, and cached reads cost less than input", () => {
    const pairs = [
      ["cachedPromptPricePer1M", "costCachedPromptPer1M"],
      ["cacheWritePricePer1M", "costCacheWritePer1M"],
      ["cacheWrite1hPricePer1M", "costCacheWrite1hPer1M"],
    ];
    let priced = 0;
    for (const m of raw.models) {
      for (const [billed, cost] of pairs) {
        if (m[billed!] === undefined) continue;
        priced++;
        expect([m.id, billed, near(m[billed!], m[cost!] * 1.2)]).toEqual([m.id, billed, true]);
      }
      if (m.cachedPromptPricePer1M !== undefined) expect(m.cachedPromptPricePer1M).toBeLessThan(m.promptPricePer1MTokens);
    }
    expect(priced).toBeGreaterThanOrEqual(5 + 2 + 3 * 6); // OpenAI 5, DeepSeek 2, Anthropic 6 × 3
    // It parses, and the scaled prices are what the charge uses.
    const loaded = parseCatalog(raw, { ANTHROPIC_API_KEY: "k", OPENAI_API_KEY: "k" });
    expect(loaded.models.get("openai/gpt-4o")).toMatchObject({ cachedPromptPico: 1_500_000, costCachedPromptPico: 1_250_000 });
  });
});
