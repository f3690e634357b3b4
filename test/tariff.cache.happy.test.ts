/**
 * Cached input and cache writes billed at their own prices (issue 32), through every door (chat completions, the
 * Responses API, the Messages API) × JSON and stream × provider type, with the cache usage in each provider's real
 * fields: OpenAI's `prompt_tokens_details.cached_tokens` (part of prompt_tokens), Anthropic's
 * `cache_read_input_tokens` / `cache_creation_input_tokens` beside input_tokens, split by `cache_creation`. Each
 * case asserts the exact charge, `charge_usdc` equal to the balance change, the door's own cached fields, and the
 * split kept on the Postgres charge row with its cost at the cost-side rates. Then the hold: a wallet holding
 * exactly the hold of a request that may write to the cache is served, and never goes below zero. Last, a
 * long-context tier (catalog `longContext`): past its threshold the whole request is billed and held at its prices.
 */
import { describe, expect, test } from "bun:test";
import { boundedRequest, holdMicro } from "../src/tariff/index.ts";
import type { ChatRequest } from "../src/providers/types.ts";
import { CACHED, CACHED_1H, inputTokensFor, REPLY } from "./helpers/anthropicStandin.ts";
import { LONG_CONTEXT, sharedGateway } from "./helpers/gateway.ts";
import { OPENAI_UNCACHED, REPLY_WORDS } from "./helpers/openaiStandin.ts";

const gw = sharedGateway();
const START = 10_000_000;

/** A request's tokens by how they are billed. */
interface Split {
  uncached: number;
  read: number;
  write5m: number;
  write1h: number;
  out: number;
}
/** Pico-USD per token: the test catalog's (test/helpers/gateway.ts), billed and cost. */
interface Rates {
  prompt: number;
  read: number;
  write5m: number;
  write1h: number;
  out: number;
}
const OPENAI_BILLED: Rates = { prompt: 2_500_000, read: 1_250_000, write5m: 2_500_000, write1h: 2_500_000, out: 10_000_000 };
const OPENAI_COST: Rates = { prompt: 2_000_000, read: 1_000_000, write5m: 2_000_000, write1h: 2_000_000, out: 8_000_000 };
// OpenAI's GPT-6 family: reads at 0.05×, writes at 1.25× (test/helpers/gateway.ts OPENAI_WRITE_PRICES); no 1-hour writes.
const OPENAI_WRITES_BILLED: Rates = { prompt: 2_500_000, read: 125_000, write5m: 3_125_000, write1h: 2_500_000, out: 10_000_000 };
const OPENAI_WRITES_COST: Rates = { prompt: 2_000_000, read: 100_000, write5m: 2_500_000, write1h: 2_000_000, out: 8_000_000 };
const CLAUDE_BILLED: Rates = { prompt: 2_500_000, read: 250_000, write5m: 3_125_000, write1h: 5_000_000, out: 10_000_000 };
const CLAUDE_COST: Rates = { prompt: 2_000_000, read: 200_000, write5m: 2_500_000, write1h: 4_000_000, out: 8_000_000 };

/** The formula, written out: one ceiling over every part, in µ. */
function priced(s: Split, r: Rates): number {
  const pico = s.uncached * r.prompt + s.read * r.read + s.write5m * r.write5m + s.write1h * r.write1h + s.out * r.out;
  return Math.ceil(pico / 1_000_000);
}

interface Case {
  model: string;
  type: "openai" | "anthropic";
  billed: Rates;
  cost: Rates;
  /** The split the stand-in reported for its last request. */
  split(): Split;
}

const CASES: Case[] = [
  {
    model: "standin/cached",
    type: "openai",
    billed: OPENAI_BILLED,
    cost: OPENAI_COST,
    split() {
      const prompt = 10 * (gw.standin.requests.at(-1) as { messages: unknown[] }).messages.length + 1;
      return { uncached: OPENAI_UNCACHED, read: prompt - OPENAI_UNCACHED, write5m: 0, write1h: 0, out: REPLY_WORDS.length };
    },
  },
  {
    // No cache_creation in its usage: all its writes are 5-minute writes.
    model: "claude/cached-priced",
    type: "anthropic",
    billed: CLAUDE_BILLED,
    cost: CLAUDE_COST,
    split: () => ({
      uncached: inputTokensFor(gw.anthropic.requests.at(-1)!),
      read: CACHED.read,
      write5m: CACHED.write,
      write1h: 0,
      out: REPLY.length,
    }),
  },
  {
    model: "claude/cached-1h",
    type: "anthropic",
    billed: CLAUDE_BILLED,
    cost: CLAUDE_COST,
    split: () => ({
      uncached: inputTokensFor(gw.anthropic.requests.at(-1)!),
      read: CACHED.read,
      write5m: CACHED_1H.ephemeral_5m_input_tokens,
      write1h: CACHED_1H.ephemeral_1h_input_tokens,
      out: REPLY.length,
    }),
  },
  {
    // Written to the cache unasked (an OpenAI-type request carries no breakpoint): prompt_tokens_details.cache_write_tokens.
    model: "standin/cache-writes",
    type: "openai",
    billed: OPENAI_WRITES_BILLED,
    cost: OPENAI_WRITES_COST,
    split() {
      const prompt = 10 * (gw.standin.requests.at(-1) as { messages: unknown[] }).messages.length + 1;
      return { uncached: OPENAI_UNCACHED, read: 0, write5m: prompt - OPENAI_UNCACHED, write1h: 0, out: REPLY_WORDS.length };
    },
  },
];

const breakpoint = { cache_control: { type: "ephemeral" } };
const prompt = (s: Split) => s.uncached + s.read + s.write5m + s.write1h;
const writes = (s: Split) => s.write5m + s.write1h;

/** An SSE body as [event name, data] pairs (`data:`-only chat chunks have no name). */
async function events(res: Response): Promise<[string, any][]> {
  expect(res.status).toBe(200);
  const out: [string, any][] = [];
  for (const frame of (await res.text()).split("\n\n")) {
    const event = /^event: (.*)$/m.exec(frame)?.[1] ?? "";
    const data = /^data: (.*)$/m.exec(frame)?.[1];
    if (data !== undefined && data !== "[DONE]") out.push([event, JSON.parse(data)]);
  }
  return out;
}

function post(path: string, key: string, body: unknown): Promise<Response> {
  return gw.handle(
    new Request(`https://gateway.test${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    }),
  );
}

async function json(res: Response): Promise<any> {
  expect(res.status).toBe(200);
  return res.json();
}

/** What each door answers, as the usage object its client reads and the door's own cached fields expected in it. */
interface Door {
  name: string;
  /** The usage object of the answer (and, for a stream, whatever else of it the door shows the cache in). */
  usage(c: Case, key: string, stream: boolean): Promise<any>;
  expected(c: Case, s: Split, charge: number, stream: boolean): Record<string, unknown>;
}

const chatBody = (model: string) => ({
  model,
  max_tokens: 100,
  messages: [{ role: "user", content: [{ type: "text", text: "Say hello.", ...breakpoint }] }],
});

const DOORS: Door[] = [
  {
    name: "chat completions",
    async usage(c, key, stream) {
      if (!stream) return (await json(await post("/v1/chat/completions", key, chatBody(c.model)))).usage;
      const body = { ...chatBody(c.model), stream: true, stream_options: { include_usage: true } };
      const chunks = (await events(await post("/v1/chat/completions", key, body))).filter(([, d]) => d.usage);
      expect(chunks).toHaveLength(1);
      return chunks[0]![1].usage;
    },
    expected: (_c, s, charge) => ({
      prompt_tokens: prompt(s),
      completion_tokens: s.out,
      total_tokens: prompt(s) + s.out,
      prompt_tokens_details: writes(s) > 0 ? { cached_tokens: s.read, cache_write_tokens: writes(s) } : { cached_tokens: s.read },
      charge_usdc: charge,
    }),
  },
  {
    name: "Responses",
    async usage(c, key, stream) {
      const body = { model: c.model, input: "Say hello.", max_output_tokens: 100, stream };
      if (!stream) return (await json(await post("/v1/responses", key, body))).usage;
      const completed = (await events(await post("/v1/responses", key, body))).filter(([e]) => e === "response.completed");
      expect(completed).toHaveLength(1);
      return completed[0]![1].response.usage;
    },
    expected: (_c, s, charge) => ({
      input_tokens: prompt(s),
      input_tokens_details: { cached_tokens: s.read, cache_write_tokens: writes(s) },
      output_tokens: s.out,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: prompt(s) + s.out,
      charge_usdc: charge,
    }),
  },
  {
    name: "Messages",
    async usage(c, key, stream) {
      const body = { ...chatBody(c.model), stream };
      if (!stream) return (await json(await post("/v1/messages", key, body))).usage;
      const all = await events(await post("/v1/messages", key, body));
      const [start, delta] = [all.find(([e]) => e === "message_start")!, all.filter(([e]) => e === "message_delta").at(-1)!];
      // The provider's own events pass through: its cache counts in message_start, the charge in the last
      // message_delta. A translated stream has them all in message_delta.
      return { start: start[1].message.usage, last: delta[1].usage };
    },
    expected(c, s, charge, stream) {
      const fields = { input_tokens: s.uncached, cache_read_input_tokens: s.read, cache_creation_input_tokens: writes(s) };
      if (c.type === "openai") {
        const usage = { ...fields, output_tokens: s.out, charge_usdc: charge };
        return stream
          ? { start: { input_tokens: 0, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 }, last: usage }
          : usage;
      }
      const byTtl = c.model === "claude/cached-1h" ? { cache_creation: CACHED_1H } : {};
      if (!stream) return { ...fields, ...byTtl, output_tokens: s.out, charge_usdc: charge };
      return { start: { ...fields, ...byTtl, output_tokens: 1 }, last: { output_tokens: s.out, charge_usdc: charge } };
    },
  },
];

async function chargeRow(wallet: string) {
  await gw.services.flusher.drain();
  return [
    ...(await gw.services.sql<Record<string, number>[]>`
    SELECT amount_usdc, cost_usd_micro, prompt_tokens, completion_tokens, cached_prompt_tokens, cache_write_tokens,
           cache_write_1h_tokens
    FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge'`),
  ];
}

for (const door of DOORS) {
  describe(`${door.name} door: cache usage billed at the cache prices`, () => {
    for (const c of CASES) {
      for (const stream of [false, true]) {
        test(`${c.model} (${c.type}), ${stream ? "stream" : "JSON"}: exact charge, charge_usdc = balance change, cached fields`, async () => {
          const { wallet, key } = await gw.newWallet(10);
          const usage = await door.usage(c, key, stream);
          const s = c.split();
          const charge = priced(s, c.billed);
          // The cache changed the bill: reads below, writes above the prompt price.
          expect(charge).not.toBe(priced({ ...s, uncached: prompt(s), read: 0, write5m: 0, write1h: 0 }, c.billed));
          expect(usage).toEqual(door.expected(c, s, charge, stream));
          expect(await gw.ledgerState(wallet)).toEqual({ balance: START - charge, locked: 0 });
          expect(await chargeRow(wallet)).toEqual([
            {
              amount_usdc: charge,
              cost_usd_micro: priced(s, c.cost),
              prompt_tokens: prompt(s),
              completion_tokens: s.out,
              cached_prompt_tokens: s.read,
              cache_write_tokens: s.write5m,
              cache_write_1h_tokens: s.write1h,
            },
          ]);
        });
      }
    }
  });
}

describe("cache prices in the catalog and the books", () => {
  test("GET /v1/models shows a model's billed cache prices under the catalog's names; a model without them shows none", async () => {
    const res = await gw.call("GET", "/v1/models");
    const byId = new Map<string, any>(res.body.data.map((m: any) => [m.id, m]));
    expect(byId.get("claude/cached-1h")).toMatchObject({
      promptPricePer1MTokens: 2.5,
      cachedPromptPricePer1M: 0.25,
      cacheWritePricePer1M: 3.125,
      cacheWrite1hPricePer1M: 5,
    });
    expect(byId.get("standin/cached")).toMatchObject({ cachedPromptPricePer1M: 1.25 });
    expect(byId.get("standin/cached")).not.toHaveProperty("cacheWritePricePer1M");
    expect(Object.keys(byId.get("standin/echo")).filter((k) => k.startsWith("cache"))).toEqual([]);
  });

  test("GET /v1/usage key rows: total_cached_prompt_tokens and total_cache_write_tokens, within the prompt totals", async () => {
    const { wallet, key } = await gw.newWallet(10);
    await json(await post("/v1/chat/completions", key, chatBody("claude/cached-1h")));
    const one = CASES[2]!.split();
    await json(await post("/v1/chat/completions", key, chatBody("standin/cached")));
    const two = CASES[0]!.split();
    const res = await gw.call("GET", `/v1/usage/${wallet}`, undefined, { authorization: `Bearer ${key}` });
    expect(res.status).toBe(200);
    expect(res.body.keys[0]).toMatchObject({
      request_count: 2,
      total_prompt_tokens: prompt(one) + prompt(two),
      total_cached_prompt_tokens: one.read + two.read,
      total_cache_write_tokens: writes(one),
      total_charged_usdc: priced(one, CLAUDE_BILLED) + priced(two, OPENAI_BILLED),
    });
  });
});

describe("the hold covers the dearest prompt rate the request can be billed at", () => {
  // The "greedy-1h" stand-in bills every byte of the body as a 1-hour cache write (2× the prompt price) and the
  // whole max_tokens: the most a request with a breakpoint can cost.
  for (const stream of [false, true]) {
    test(`a wallet holding exactly the hold is served and never goes below zero (${stream ? "stream" : "JSON"})`, async () => {
      const body = { ...chatBody("claude/greedy-1h"), stream, ...(stream && { stream_options: { include_usage: true } }) } as ChatRequest;
      const model = gw.services.config.catalog.models.get("claude/greedy-1h")!;
      const { bound } = boundedRequest(model, structuredClone(body), stream);
      // A breakpoint may make the provider write at the 1-hour price: the hold is at it, above one at the prompt price.
      expect(bound.micro).toBe(holdMicro(model, bound.promptTokens, bound.completionTokens, true));
      expect(bound.micro).toBeGreaterThan(holdMicro(model, bound.promptTokens, bound.completionTokens, false));

      const short = await gw.newWallet(0);
      await gw.grant(short.wallet, bound.micro - 1);
      const refused = await post("/v1/chat/completions", short.key, body);
      expect(refused.status).toBe(402);
      expect((await refused.json()).error).toBe("INSUFFICIENT_BALANCE");
      expect(await gw.ledgerState(short.wallet)).toEqual({ balance: bound.micro - 1, locked: 0 });

      const { wallet, key } = await gw.newWallet(0);
      await gw.grant(wallet, bound.micro);
      const res = await post("/v1/chat/completions", key, body);
      const usage = stream ? (await events(res)).find(([, d]) => d.usage)?.[1].usage : (await json(res)).usage;
      const billed = gw.anthropic.billed.at(-1)!;
      const charge = priced({ uncached: 0, read: 0, write5m: 0, write1h: billed.input_tokens, out: billed.output_tokens }, CLAUDE_BILLED);
      // Billed at the 1-hour write price, the charge would have overdrawn a hold taken at the prompt price.
      expect(charge).toBeGreaterThan(holdMicro(model, bound.promptTokens, bound.completionTokens, false));
      expect(usage.charge_usdc).toBe(charge);
      const after = await gw.ledgerState(wallet);
      expect(after).toEqual({ balance: bound.micro - charge, locked: 0 });
      expect(after.balance).toBeGreaterThanOrEqual(0);
    });
  }

  test("an OpenAI-type model with a cache-write price is held at it with no breakpoint in the body (the provider writes unasked)", () => {
    const body = { model: "standin/cache-writes", max_tokens: 100, messages: [{ role: "user", content: "Say hello." }] } as ChatRequest;
    const model = gw.services.config.catalog.models.get("standin/cache-writes")!;
    const { init, bound } = boundedRequest(model, structuredClone(body), false);
    expect(init.body as string).not.toContain("cache_control");
    expect(bound.micro).toBe(holdMicro(model, bound.promptTokens, bound.completionTokens, true));
    expect(bound.micro).toBeGreaterThan(holdMicro(model, bound.promptTokens, bound.completionTokens, false));
    // A model without a write price holds what it did.
    const plain = gw.services.config.catalog.models.get("standin/cached")!;
    const held = boundedRequest(plain, { ...structuredClone(body), model: "standin/cached" }, false).bound;
    expect(held.micro).toBe(holdMicro(plain, held.promptTokens, held.completionTokens, false));
  });
});

describe("a long-context tier: past its threshold, the whole request at the tier's prices", () => {
  const LONG: Rates = { prompt: 5_000_000, read: 5_000_000, write5m: 5_000_000, write1h: 5_000_000, out: 15_000_000 };
  const LONG_COST: Rates = { prompt: 4_000_000, read: 4_000_000, write5m: 4_000_000, write1h: 4_000_000, out: 12_000_000 };
  for (const stream of [false, true]) {
    test(`chat completions, ${stream ? "stream" : "JSON"}: charged, held and costed at the tier; listed on /v1/models`, async () => {
      const { wallet, key } = await gw.newWallet(10);
      const body = { model: "standin/long-context", max_tokens: 100, messages: [{ role: "user", content: "Say hello." }] };
      const model = gw.services.config.catalog.models.get("standin/long-context")!;
      const { bound } = boundedRequest(model, structuredClone(body) as ChatRequest, stream);
      expect(bound.promptTokens).toBeGreaterThan(LONG_CONTEXT.aboveTokens);
      expect(bound.micro).toBe(Math.ceil((bound.promptTokens * LONG.prompt + bound.completionTokens * LONG.out) / 1e6));
      const res = await post("/v1/chat/completions", key, { ...body, stream, ...(stream && { stream_options: { include_usage: true } }) });
      const usage = stream ? (await events(res)).find(([, d]) => d.usage)?.[1].usage : (await json(res)).usage;
      const s: Split = { uncached: 11, read: 0, write5m: 0, write1h: 0, out: REPLY_WORDS.length };
      const charge = priced(s, LONG);
      expect(usage).toMatchObject({ prompt_tokens: 11, completion_tokens: REPLY_WORDS.length, charge_usdc: charge });
      expect(await gw.ledgerState(wallet)).toEqual({ balance: START - charge, locked: 0 });
      expect((await chargeRow(wallet))[0]).toMatchObject({ amount_usdc: charge, cost_usd_micro: priced(s, LONG_COST) });
      const listed = (await gw.call("GET", "/v1/models/standin/long-context")).body;
      expect(listed.longContext).toEqual({ aboveTokens: 10, promptPricePer1MTokens: 5, completionPricePer1M: 15 });
    });
  }
});
