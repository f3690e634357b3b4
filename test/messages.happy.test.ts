/**
 * POST /v1/messages and /v1/messages/count_tokens driven by Anthropic's official SDK, unmodified but for its base
 * URL, key and fetch: against an Anthropic-type stand-in ("claude/…") and an OpenAI-type one ("standin/…"). Each
 * test asserts the text, the usage the answer reports and the exact µUSDC charge.
 */
import Anthropic from "@anthropic-ai/sdk";
import { describe, expect, test } from "bun:test";
import { chatRequestOf } from "../src/providers/anthropic/messagesRequest.ts";
import { countPromptTokens } from "../src/providers/tokens.ts";
import { AFTER_TOOL, CACHED, inputTokensFor, REPLY, SIGNATURE, THINKING, TOOL_ID, TOOL_INTRO } from "./helpers/anthropicStandin.ts";
import { BASE, expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { LONG_TOOL, REPLY_WORDS } from "./helpers/openaiStandin.ts";
import { conformance } from "./helpers/openapi.ts";

const gw = sharedGateway();

const SONNET = "claude/claude-sonnet-4-5";
const ECHO = "standin/echo";
const START = 10_000_000;

function anthropic(apiKey: string): Anthropic {
  return new Anthropic({ baseURL: BASE, apiKey, fetch: gw.fetch, maxRetries: 0 });
}

/** The last request the Anthropic stand-in received, and the input tokens it reported for it. */
function lastClaude() {
  const request = gw.anthropic.requests.at(-1)!;
  return { request, prompt: inputTokensFor(request) };
}

// The SDK's types name every optional field as required (citations, caller…): answers are compared as plain data.
const blocks = (m: Anthropic.Message): unknown[] => m.content;
const usage = (m: Anthropic.Message): unknown => m.usage;

/** The OpenAI stand-in's prompt tokens for a request of `n` chat messages. */
const echoPrompt = (n: number) => 10 * n + 1;

async function pgCharges(wallet: string) {
  await gw.services.flusher.drain();
  return [
    ...(await gw.services.sql<{ amount_usdc: number; prompt_tokens: number; completion_tokens: number; model: string }[]>`
    SELECT amount_usdc, prompt_tokens, completion_tokens, model FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge' ORDER BY occurred_at`),
  ];
}

const weather: Anthropic.Tool = {
  name: "get_weather",
  description: "Current weather of a city",
  input_schema: { type: "object", properties: { city: { type: "string" }, unit: { type: "string" } }, required: ["city"] },
};
const TOOL_INPUT = { city: "Paris", unit: "celsius" };

describe("messages.create", () => {
  test("Anthropic-type model: the client's request goes natively, the provider's answer comes back with the id asked for; usage, exact charge in Redis and Postgres", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const msg = await anthropic(key).messages.create({
      model: SONNET,
      max_tokens: 100,
      system: "You are terse.",
      messages: [{ role: "user", content: "Say hello." }],
    });
    const { request, prompt } = lastClaude();
    // As the client sent it (a chat translation would have made the system a list of blocks), with the upstream name.
    expect(request).toEqual({
      model: "claude-sonnet-4-5",
      max_tokens: 100,
      system: "You are terse.",
      messages: [{ role: "user", content: "Say hello." }],
    });
    expect(msg).toMatchObject({
      id: "msg_01StandinMessage",
      type: "message",
      role: "assistant",
      model: SONNET,
      stop_reason: "end_turn",
      stop_sequence: null,
    });
    expect(blocks(msg)).toEqual([{ type: "text", text: REPLY.join("") }]);
    const charge = expectedCharge(prompt, REPLY.length);
    expect(usage(msg)).toEqual({
      input_tokens: prompt,
      output_tokens: REPLY.length,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      charge_usdc: charge,
    });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - charge, locked: 0 });
    expect(await pgCharges(wallet)).toEqual([
      { amount_usdc: charge, prompt_tokens: prompt, completion_tokens: REPLY.length, model: SONNET },
    ]);
  });

  test("OpenAI-type model: translated to chat and back; system blocks, stop_sequences, sampling, metadata", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const msg = await anthropic(key).messages.create({
      model: ECHO,
      max_tokens: 50,
      system: [{ type: "text", text: "Be brief.", cache_control: { type: "ephemeral" } }],
      messages: [{ role: "user", content: [{ type: "text", text: "Hi" }] }],
      stop_sequences: ["END"],
      metadata: { user_id: "user-7" },
    });
    expect(gw.standin.requests.at(-1)).toMatchObject({
      model: "echo",
      max_tokens: 50,
      stop: ["END"],
      user: "user-7",
      messages: [
        { role: "system", content: [{ type: "text", text: "Be brief." }] },
        { role: "user", content: [{ type: "text", text: "Hi" }] },
      ],
    });
    expect(blocks(msg)).toEqual([{ type: "text", text: REPLY_WORDS.join("") }]);
    expect(msg.id).toBe("msg_chatcmpl-standin");
    expect(usage(msg)).toMatchObject({ input_tokens: echoPrompt(2), output_tokens: REPLY_WORDS.length });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - expectedCharge(echoPrompt(2), REPLY_WORDS.length), locked: 0 });
  });

  test("x-api-key (SDK 0.x, AI SDK) authenticates too; any anthropic-version and anthropic-beta are accepted", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const headers = { "x-api-key": key, "anthropic-version": "2023-06-01", "anthropic-beta": "token-counting-2024-11-01" };
    const res = await gw.call(
      "POST",
      "/v1/messages",
      { model: ECHO, max_tokens: 20, messages: [{ role: "user", content: "Hi" }] },
      headers,
    );
    expect(res.status).toBe(200);
    expect(res.body.content).toEqual([{ type: "text", text: REPLY_WORDS.join("") }]);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - expectedCharge(echoPrompt(1), REPLY_WORDS.length), locked: 0 });
  });
});

describe("messages.stream", () => {
  for (const [model, words, prompt] of [
    [SONNET, REPLY, () => lastClaude().prompt],
    [ECHO, REPLY_WORDS, () => echoPrompt(1)],
  ] as const) {
    test(`${model}: text events, finalMessage with the usage, the exact charge`, async () => {
      const { wallet, key } = await gw.newWallet(10);
      const stream = anthropic(key).messages.stream({ model, max_tokens: 100, messages: [{ role: "user", content: "Say hello." }] });
      let text = "";
      stream.on("text", (t) => (text += t));
      const msg = await stream.finalMessage();
      expect(text).toBe(words.join(""));
      expect(blocks(msg)).toEqual([{ type: "text", text: words.join("") }]);
      expect(msg.stop_reason).toBe("end_turn");
      expect(usage(msg)).toMatchObject({ input_tokens: prompt(), output_tokens: words.length });
      expect(await gw.ledgerState(wallet)).toEqual({ balance: START - expectedCharge(prompt(), words.length), locked: 0 });
    });
  }

  test("the raw events: the provider's own, ping included, the model id asked for in message_start, message_delta with its usage", async () => {
    const { key } = await gw.newWallet(10);
    const res = await gw.handle(
      new Request(`${BASE}/v1/messages`, {
        method: "POST",
        headers: { "x-api-key": key },
        body: JSON.stringify({ model: SONNET, max_tokens: 100, stream: true, messages: [{ role: "user", content: "Hi" }] }),
      }),
    );
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    const events = (await res.text()).split("\n\n").filter(Boolean);
    const names = events.map((e) => /^event: (\w+)\n/.exec(e)![1]);
    expect(names).toEqual([
      "message_start",
      "content_block_start",
      "ping",
      ...REPLY.map(() => "content_block_delta"),
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);
    const data = (e: string) => JSON.parse(e.split("\ndata: ")[1]!);
    expect(data(events[0]!).message).toMatchObject({
      id: "msg_01StandinMessage",
      model: SONNET,
      usage: { input_tokens: lastClaude().prompt, output_tokens: 1 },
    });
    expect(data(events.at(-2)!)).toEqual({
      type: "message_delta",
      delta: { stop_reason: "end_turn", stop_sequence: null },
      usage: { charge_usdc: expectedCharge(lastClaude().prompt, REPLY.length), output_tokens: REPLY.length },
    });
    expect(events.join("")).not.toContain('"model":"claude-sonnet-4-5"');
  });

  test("thinking: a signed thinking block before the text, streamed and not", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const client = anthropic(key);
    const params = {
      model: SONNET,
      max_tokens: 2_000,
      thinking: { type: "enabled", budget_tokens: 1_024 },
      messages: [{ role: "user", content: "Think." }],
    } satisfies Anthropic.MessageCreateParamsNonStreaming;
    const one = await client.messages.create(params);
    expect(lastClaude().request.thinking).toEqual({ type: "enabled", budget_tokens: 1_024 });
    const two = await client.messages.stream(params).finalMessage();
    for (const msg of [one, two]) {
      expect(blocks(msg)).toEqual([
        { type: "thinking", thinking: THINKING.join(""), signature: SIGNATURE },
        { type: "text", text: REPLY.join("") },
      ]);
      expect(msg.usage.output_tokens).toBe(THINKING.length + REPLY.length);
    }
    expect(await gw.ledgerState(wallet)).toEqual({
      balance: START - 2 * expectedCharge(lastClaude().prompt, THINKING.length + REPLY.length),
      locked: 0,
    });
  });
});

describe("a tool round trip", () => {
  test("Anthropic-type model: tool_use (JSON and stream), then tool_result with the signed thinking sent back", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const client = anthropic(key);
    const ask: Anthropic.MessageParam = { role: "user", content: "Weather in Paris?" };
    const thinking = { type: "enabled", budget_tokens: 1_024 } as const;
    const first = await client.messages.create({
      model: SONNET,
      max_tokens: 2_000,
      thinking,
      tools: [weather],
      tool_choice: { type: "auto" },
      messages: [ask],
    });
    const firstPrompt = lastClaude().prompt;
    expect(lastClaude().request.tools).toEqual([
      { name: "get_weather", description: weather.description, input_schema: weather.input_schema },
    ]);
    expect(lastClaude().request.tool_choice).toEqual({ type: "auto" });
    expect(first.stop_reason).toBe("tool_use");
    const answer = [
      { type: "thinking", thinking: THINKING.join(""), signature: SIGNATURE },
      { type: "text", text: TOOL_INTRO.join("") },
      { type: "tool_use", id: TOOL_ID, name: "get_weather", input: TOOL_INPUT },
    ];
    expect(blocks(first)).toEqual(answer);
    const streamed = await client.messages
      .stream({ model: SONNET, max_tokens: 2_000, thinking, tools: [weather], messages: [ask] })
      .finalMessage();
    expect(blocks(streamed)).toEqual(answer);
    expect(streamed.stop_reason).toBe("tool_use");

    const second = await client.messages.create({
      model: SONNET,
      max_tokens: 2_000,
      thinking,
      tools: [weather],
      messages: [
        ask,
        { role: "assistant", content: first.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: TOOL_ID, content: "21°C, sunny" }] },
      ],
    });
    const { request, prompt } = lastClaude();
    // Anthropic needs the signed thinking before the tool call when the conversation goes on: it is sent back as it came.
    expect(request.messages.slice(1)).toEqual([
      { role: "assistant", content: answer },
      { role: "user", content: [{ type: "tool_result", tool_use_id: TOOL_ID, content: "21°C, sunny" }] },
    ]);
    expect(blocks(second)).toEqual([answer[0], { type: "text", text: AFTER_TOOL.join("") }]);
    expect(second.stop_reason).toBe("end_turn");
    const toolTokens = THINKING.length + TOOL_INTRO.length + 4; // the stand-in's four JSON fragments
    const charged = 2 * expectedCharge(firstPrompt, toolTokens) + expectedCharge(prompt, THINKING.length + AFTER_TOOL.length);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - charged, locked: 0 });
  });

  test("OpenAI-type model: a tool call (usage counted by the gateway), then its result", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const client = anthropic(key);
    const tool: Anthropic.Tool = { name: LONG_TOOL.name, input_schema: { type: "object", properties: {} } };
    const ask: Anthropic.MessageParam = { role: "user", content: "Record it." };
    const first = await client.messages
      .stream({ model: "standin/no-usage-long", max_tokens: 1_000, tools: [tool], messages: [ask] })
      .finalMessage();
    const call = first.content.find((b) => b.type === "tool_use")!;
    expect(call as unknown).toEqual({
      type: "tool_use",
      id: LONG_TOOL.id,
      name: LONG_TOOL.name,
      input: JSON.parse(LONG_TOOL.arguments.join("")),
    });
    expect(first.stop_reason).toBe("tool_use");
    // The provider reported no usage: the answer reports the counted usage, and that is what was charged.
    const firstCharge = expectedCharge(first.usage.input_tokens, first.usage.output_tokens);
    expect(first.usage.output_tokens).toBeGreaterThan(100);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - firstCharge, locked: 0 });

    const second = await client.messages.create({
      model: ECHO,
      max_tokens: 100,
      tools: [tool],
      messages: [
        ask,
        { role: "assistant", content: first.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: LONG_TOOL.id, content: [{ type: "text", text: "saved" }] }] },
      ],
    });
    expect(gw.standin.requests.at(-1)!.messages).toEqual([
      { role: "user", content: "Record it." },
      {
        role: "assistant",
        content: expect.any(String),
        tool_calls: [{ id: LONG_TOOL.id, type: "function", function: { name: LONG_TOOL.name, arguments: JSON.stringify(call.input) } }],
      },
      { role: "tool", tool_call_id: LONG_TOOL.id, content: [{ type: "text", text: "saved" }] },
    ]);
    expect(blocks(second)).toEqual([{ type: "text", text: REPLY_WORDS.join("") }]);
    expect(await gw.ledgerState(wallet)).toEqual({
      balance: START - firstCharge - expectedCharge(echoPrompt(3), REPLY_WORDS.length),
      locked: 0,
    });
  });
});

describe("server tools on a translated path", () => {
  test("an OpenAI-type model cannot run them: left out of the upstream request and named in X-Tools-Left-Out; charged as any answer", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const res = await gw.handle(
      new Request(`${BASE}/v1/messages`, {
        method: "POST",
        headers: { "x-api-key": key, "content-type": "application/json" },
        body: JSON.stringify({
          model: ECHO,
          max_tokens: 50,
          messages: [{ role: "user", content: "Hi" }],
          tools: [
            { type: "web_search_20250305", name: "web_search", max_uses: 3 },
            weather,
            { type: "web_search_20250305", name: "again" },
          ],
        }),
      }),
    );
    expect(res.status).toBe(200);
    expect(res.headers.get("x-tools-left-out")).toBe("web_search_20250305");
    expect((await res.json()).content).toEqual([{ type: "text", text: REPLY_WORDS.join("") }]);
    const upstream = gw.standin.requests.at(-1)! as { tools: { function: { name: string } }[] };
    expect(upstream.tools.map((t) => t.function.name)).toEqual(["get_weather"]);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - expectedCharge(echoPrompt(1), REPLY_WORDS.length), locked: 0 });
  });

  test("only server tools, with a tool_choice naming one: neither goes upstream", async () => {
    const { key } = await gw.newWallet(10);
    const msg = await anthropic(key).messages.create({
      model: ECHO,
      max_tokens: 50,
      messages: [{ role: "user", content: "Hi" }],
      tools: [{ type: "web_search_20250305", name: "web_search" }],
      tool_choice: { type: "tool", name: "web_search" },
    });
    expect(msg.content.map((b) => (b.type === "text" ? b.text : b.type))).toEqual([REPLY_WORDS.join("")]);
    const upstream = gw.standin.requests.at(-1)!;
    expect(upstream.tools).toBeUndefined();
    expect(upstream.tool_choice).toBeUndefined();
  });
});

describe("to an Anthropic provider, natively (no translation through chat)", () => {
  const cache = { cache_control: { type: "ephemeral", ttl: "1h" } } as const;

  test("what a chat translation would lose survives: separate text blocks, is_error, the stop sequence named in the answer, the cache_control breakpoints", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const client = anthropic(key);
    const params = {
      model: SONNET,
      max_tokens: 100,
      system: [{ type: "text", text: "Be brief.", ...cache }],
      tools: [{ ...weather, ...cache }],
      stop_sequences: ["sunny"],
      messages: [
        { role: "user", content: [{ type: "text", text: "Weather in Paris?", ...cache }] },
        {
          role: "assistant",
          content: [
            { type: "text", text: "Let me check." },
            { type: "text", text: "One moment." },
            { type: "tool_use", id: TOOL_ID, name: "get_weather", input: TOOL_INPUT, ...cache },
          ],
        },
        { role: "user", content: [{ type: "tool_result", tool_use_id: TOOL_ID, content: "station offline", is_error: true, ...cache }] },
      ],
    } satisfies Anthropic.MessageCreateParamsNonStreaming;
    const one = await client.messages.create(params);
    const { request, prompt } = lastClaude();
    // The breakpoints reach Anthropic (without them it never caches): the hold covers the writes they may cause.
    expect(request).toEqual({
      model: "claude-sonnet-4-5",
      max_tokens: 100,
      system: [{ type: "text", text: "Be brief.", ...cache }],
      tools: [{ name: "get_weather", description: weather.description, input_schema: weather.input_schema, ...cache }],
      stop_sequences: ["sunny"],
      messages: [
        { role: "user", content: [{ type: "text", text: "Weather in Paris?", ...cache }] },
        {
          role: "assistant",
          content: [
            { type: "text", text: "Let me check." },
            { type: "text", text: "One moment." },
            { type: "tool_use", id: TOOL_ID, name: "get_weather", input: TOOL_INPUT, ...cache },
          ],
        },
        { role: "user", content: [{ type: "tool_result", tool_use_id: TOOL_ID, content: "station offline", is_error: true, ...cache }] },
      ],
    });
    const two = await client.messages.stream(params).finalMessage();
    expect(lastClaude().request).toEqual({ ...request, stream: true });
    // The stand-in stops before "sunny": chat would have said end_turn and no sequence.
    const words = AFTER_TOOL.slice(0, 2);
    for (const msg of [one, two]) {
      expect(msg).toMatchObject({ model: SONNET, stop_reason: "stop_sequence", stop_sequence: "sunny" });
      expect(blocks(msg)).toEqual([{ type: "text", text: words.join("") }]);
      expect(usage(msg)).toEqual({
        input_tokens: prompt,
        output_tokens: words.length,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        // The SDK's stream accumulator keeps only the usage fields it knows (the raw events carry the charge).
        ...(msg === one && { charge_usdc: expectedCharge(prompt, words.length) }),
      });
    }
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - 2 * expectedCharge(prompt, words.length), locked: 0 });
  });

  test("a system turn among the messages (which the door takes, as chat does) joins the system prompt", async () => {
    const { key } = await gw.newWallet(10);
    const res = await gw.call(
      "POST",
      "/v1/messages",
      {
        model: SONNET,
        max_tokens: 50,
        system: "Be brief.",
        messages: [
          { role: "system", content: "Answer in English." },
          { role: "user", content: "Hi" },
        ],
      },
      { "x-api-key": key },
    );
    expect(res.status).toBe(200);
    expect(lastClaude().request).toMatchObject({
      system: [
        { type: "text", text: "Be brief." },
        { type: "text", text: "Answer in English." },
      ],
      messages: [{ role: "user", content: "Hi" }],
    });
  });

  test("cache reads and writes the provider reports: shown as it reported them, billed with the input at the prompt price when the catalog gives no cache prices", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const client = anthropic(key);
    const params = { model: "claude/cached", max_tokens: 100, messages: [{ role: "user" as const, content: "Say hello." }] };
    const one = await client.messages.create(params);
    const two = await client.messages.stream(params).finalMessage();
    const { prompt } = lastClaude();
    // The catalog gives this model no cache prices: reads and writes are billed at the prompt price.
    const charge = expectedCharge(prompt + CACHED.write + CACHED.read, REPLY.length);
    for (const msg of [one, two]) {
      expect(msg.model).toBe("claude/cached");
      expect(usage(msg)).toEqual({
        input_tokens: prompt,
        output_tokens: REPLY.length,
        cache_creation_input_tokens: CACHED.write,
        cache_read_input_tokens: CACHED.read,
        ...(msg === one && { charge_usdc: charge }),
      });
    }
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - 2 * charge, locked: 0 });
    expect(await pgCharges(wallet)).toEqual(
      [one, two].map(() => ({
        amount_usdc: charge,
        prompt_tokens: prompt + CACHED.write + CACHED.read,
        completion_tokens: REPLY.length,
        model: "claude/cached",
      })),
    );
  });
});

describe("count_tokens", () => {
  test("the gateway's tokenizer count of the prompt; nothing held or charged", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const params = {
      model: SONNET,
      system: "You are terse.",
      messages: [{ role: "user" as const, content: "How many tokens is this?" }],
      tools: [weather],
    };
    const counted = await anthropic(key).messages.countTokens(params);
    expect(counted).toEqual({ input_tokens: await countPromptTokens(chatRequestOf(params, true)) });
    expect(counted.input_tokens).toBeGreaterThan(10);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START, locked: 0 });
  });
});

describe("client disconnect", () => {
  test("a client that leaves mid-stream is charged for what was produced, as on chat; the hold is gone", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const res = await gw.handle(
      new Request(`${BASE}/v1/messages`, {
        method: "POST",
        headers: { "x-api-key": key },
        body: JSON.stringify({ model: "standin/drip", max_tokens: 100, stream: true, messages: [{ role: "user", content: "Hi" }] }),
      }),
    );
    const reader = res.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    expect(first).toStartWith("event: message_start\n");
    expect((await gw.ledgerState(wallet)).locked).toBeGreaterThan(0);
    const cancelled = gw.standin.cancelled;
    // cancel() resolves once the gateway has stopped the provider and settled the hold.
    await reader.cancel();
    await gw.standin.cancelledAtLeast(cancelled + 1);
    const state = await gw.ledgerState(wallet);
    expect(state.locked).toBe(0);
    expect(state.balance).toBeLessThan(START);
    const rows = await pgCharges(wallet);
    expect(rows).toHaveLength(1);
    expect(rows[0]!.amount_usdc).toBe(START - state.balance);
    expect(rows[0]!.amount_usdc).toBe(expectedCharge(rows[0]!.prompt_tokens, rows[0]!.completion_tokens));
  });
});

describe("the OpenAPI document", () => {
  test("lists both routes; their live answers (JSON, stream, count, 400, 401, 402) match it", async () => {
    const { conforms } = await conformance(gw);
    const { key } = await gw.newWallet(10);
    const auth = { "x-api-key": key };
    const body = { model: SONNET, max_tokens: 50, messages: [{ role: "user", content: "Hi" }] };
    const answer = await conforms("POST", "/v1/messages", await post("/v1/messages", body, auth));
    expect(answer.type).toBe("message");
    expect(await conforms("POST", "/v1/messages", await post("/v1/messages", { ...body, stream: true }, auth))).toContain(
      "event: message_stop",
    );
    expect(await conforms("POST", "/v1/messages/count_tokens", await post("/v1/messages/count_tokens", body, auth))).toHaveProperty(
      "input_tokens",
    );
    await conforms("POST", "/v1/messages", await post("/v1/messages", { model: SONNET, messages: body.messages }, auth));
    await conforms("POST", "/v1/messages", await post("/v1/messages", body, {}));
    await conforms("POST", "/v1/messages", await post("/v1/messages", body, { "x-api-key": (await gw.newWallet(0)).key }));
    await conforms("POST", "/v1/messages/count_tokens", await post("/v1/messages/count_tokens", body, {}));
  });
});

function post(path: string, body: unknown, headers: Record<string, string>): Promise<Response> {
  return gw.handle(
    new Request(`${BASE}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
    }),
  );
}
