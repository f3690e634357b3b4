/**
 * A hostile key holder against the money rules (docs/design.md "Money rules"): requests whose images cost far more than
 * their bytes, raced against a small wallet and a small key budget, must never spend more than the credit; fields
 * that would raise the provider's bill behind the hold are refused before any reserve and reach no provider.
 */
import { describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { setLogLevel } from "../src/log.ts";
import { holdOverruns } from "../src/billing/overruns.ts";
import { REFUSED_FIELDS } from "../src/tariff/index.ts";
import { IMAGE_TOKENS as CLAUDE_IMAGE_TOKENS, REPLY } from "./helpers/anthropicStandin.ts";
import { expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { IMAGE_TOKENS, REPLY_WORDS, usageFor } from "./helpers/openaiStandin.ts";

// A rate limit out of the way of the bursts below.
const gw = sharedGateway({ RATE_LIMIT_REQUESTS: "100000" });

const IMAGE_URL = "https://img.example/cat.png"; // 27 bytes that a provider bills 1,445 tokens at high detail
const imageMessages = (n: number, detail = "high") => [
  {
    role: "user",
    content: [
      { type: "text", text: "Compare these." },
      ...Array.from({ length: n }, () => ({ type: "image_url", image_url: { url: IMAGE_URL, detail } })),
    ],
  },
];
// Extra fields the SDK's types do not know; sent as they are.
const extension = (fields: Record<string, unknown>) => fields as {};

/** One chat call through the SDK, JSON or stream (read to its end): its status and error code. */
async function send(client: OpenAI, body: Record<string, unknown>): Promise<{ status: number; code?: string }> {
  try {
    if (body.stream) {
      const stream = await client.chat.completions.create({
        ...(body as unknown as OpenAI.ChatCompletionCreateParamsStreaming),
        stream: true,
      });
      for await (const chunk of stream) if ((chunk as any).error) return { status: 200, code: "stream error" };
    } else {
      await client.chat.completions.create(body as any);
    }
    return { status: 200 };
  } catch (e) {
    if (e instanceof OpenAI.APIError) return { status: e.status ?? 0, code: e.error as string };
    throw e;
  }
}

async function pgCharges(wallet: string): Promise<{ n: number; total: number }> {
  await gw.services.flusher.drain();
  const [row] = await gw.services.sql<{ n: number; total: number }[]>`
    SELECT COUNT(*)::int AS n, COALESCE(SUM(amount_usdc), 0)::int AS total FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge'`;
  return row!;
}

/** The key's spent and locked counters in Redis. */
async function keyState(wallet: string, keyId: number): Promise<{ spent: number; locked: number }> {
  const [[spent, locked]] = (await gw.services.ledger.reads.keyCounters(
    [gw.services.ledger.principal(keyId, wallet)],
    ["spent", "locked"],
  )) as [number[]];
  return { spent: spent!, locked: locked! };
}

// Each variant's request and what the stand-in bills for one answer to it (10 high-detail images, 50 tokens cap).
const variants = [
  {
    name: "OpenAI dialect, JSON",
    model: "standin/vision",
    stream: false,
    charge: expectedCharge(usageFor(1, 10 * IMAGE_TOKENS.high).prompt_tokens, REPLY_WORDS.length),
  },
  {
    name: "OpenAI dialect, stream",
    model: "standin/vision",
    stream: true,
    charge: expectedCharge(usageFor(1, 10 * IMAGE_TOKENS.high).prompt_tokens, REPLY_WORDS.length),
  },
  {
    name: "Anthropic dialect, stream",
    model: "claude/claude-sonnet-4-5",
    stream: true,
    charge: expectedCharge(10 + 3 + 10 * CLAUDE_IMAGE_TOKENS, REPLY.length),
  },
];

describe("the hold bounds the bill: concurrent image-heavy requests", () => {
  test("the reserve holds the images at their maximum, not their bytes (the 402 names it exactly)", async () => {
    const { key } = await gw.newWallet(0);
    const body = { model: "standin/vision", messages: imageMessages(10), max_tokens: 50 };
    const res = await gw.call("POST", "/v1/chat/completions", body, { authorization: `Bearer ${key}` });
    expect(res.status).toBe(402);
    // What goes upstream: the same fields with the upstream model name; the 10 URLs' bytes give way to 10 × 1,445.
    const upstreamBytes = Buffer.byteLength(JSON.stringify({ ...body, model: "vision" }));
    expect(res.body.required_usdc).toBe(expectedCharge(upstreamBytes - 10 * IMAGE_URL.length + 8 + 10 * IMAGE_TOKENS.high, 50));
    expect(res.body.required_usdc).toBeGreaterThanOrEqual(variants[0]!.charge);
  });

  for (const v of variants) {
    test(`${v.name}: 40 at once on a wallet of 0.20 USD never overdraw it`, async () => {
      const overruns = holdOverruns().count;
      const { wallet, key } = await gw.newWallet(0);
      await gw.grant(wallet, 200_000);
      const client = gw.openai(key);
      const body = { model: v.model, messages: imageMessages(10), max_tokens: 50, stream: v.stream };
      const results = await Promise.all(Array.from({ length: 40 }, () => send(client, body)));

      const ok = results.filter((r) => r.status === 200).length;
      expect(ok).toBeGreaterThan(0);
      expect(ok).toBeLessThan(40);
      for (const r of results) if (r.status !== 200) expect(r).toEqual({ status: 402, code: "INSUFFICIENT_BALANCE" });
      for (const r of results) if (r.status === 200) expect(r.code).toBeUndefined();

      // Every answer was charged what the provider billed; together never more than the credit.
      expect(ok * v.charge).toBeLessThanOrEqual(200_000);
      expect(await gw.ledgerState(wallet)).toEqual({ balance: 200_000 - ok * v.charge, locked: 0 });
      expect(await pgCharges(wallet)).toEqual({ n: ok, total: ok * v.charge });
      expect(holdOverruns().count).toBe(overruns); // no settle went above its hold
    });
  }

  test("a key budget of 0.10 USD on a rich wallet: spent never passes it (JSON and streams mixed)", async () => {
    const overruns = holdOverruns().count;
    const { wallet, key, keyId } = await gw.newWallet(10, { budget_usdc: 100_000 });
    const client = gw.openai(key);
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        send(client, { model: "standin/vision", messages: imageMessages(10), max_tokens: 50, stream: i % 2 === 0 }),
      ),
    );
    const ok = results.filter((r) => r.status === 200).length;
    expect(ok).toBeGreaterThan(0);
    expect(ok).toBeLessThan(40);
    for (const r of results) if (r.status !== 200) expect(r).toEqual({ status: 402, code: "KEY_BUDGET_EXCEEDED" });

    const charge = variants[0]!.charge;
    expect(await keyState(wallet, keyId)).toEqual({ spent: ok * charge, locked: 0 });
    expect(ok * charge).toBeLessThanOrEqual(100_000);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - ok * charge, locked: 0 });
    expect(holdOverruns().count).toBe(overruns);
  });

  test("an image for a model whose catalog names no imageTokens holds the whole context window", async () => {
    // OpenAI-compatible hosts' vision models bill up to 16,384 tokens an image (Qwen-VL): no default is safe.
    const { wallet, key } = await gw.newWallet(0);
    await gw.grant(wallet, 200_000);
    const requests = gw.standin.requests.length;
    const body = { model: "standin/echo", messages: imageMessages(1), max_tokens: 50 };
    const res = await gw.call("POST", "/v1/chat/completions", body, { authorization: `Bearer ${key}` });
    // 128,000 prompt tokens at 2.5 USD per 1M = 0.32 USD, more than the wallet holds.
    expect(res).toMatchObject({ status: 402, body: { error: "INSUFFICIENT_BALANCE", required_usdc: expectedCharge(128_000, 50) } });
    expect(gw.standin.requests.length).toBe(requests);

    await gw.grant(wallet, 1_000_000);
    const answer = await gw.openai(key).chat.completions.create(body as any);
    const charge = expectedCharge(usageFor(1, IMAGE_TOKENS.high).prompt_tokens, REPLY_WORDS.length);
    expect(answer.usage!.prompt_tokens).toBe(usageFor(1, IMAGE_TOKENS.high).prompt_tokens);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_200_000 - charge, locked: 0 });
  });

  test("a settle above its hold is charged all the same, counted, and logged with the request's shape, never its content", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const before = holdOverruns();
    const lines: string[] = [];
    const write = process.stderr.write;
    setLogLevel("warn");
    process.stderr.write = ((chunk: string) => (lines.push(String(chunk)), true)) as typeof process.stderr.write;
    try {
      // "underpriced" claims 1 token per image; the provider bills 1,445.
      await gw.openai(key).chat.completions.create({ model: "standin/underpriced", messages: imageMessages(10) as any, max_tokens: 50 });
      await gw.services.chat.idle();
    } finally {
      process.stderr.write = write;
      setLogLevel("error");
    }
    const charge = variants[0]!.charge;
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000 - charge, locked: 0 });
    const after = holdOverruns();
    expect(after.count).toBe(before.count + 1);
    expect(after.excessMicro).toBeGreaterThan(before.excessMicro);

    const logged = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === "charge above its hold");
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({
      level: "warn",
      model: "standin/underpriced",
      charge,
      shape: { messages: 1, images: 10, audio: 0, files: 0, otherParts: 0, tools: 0, choices: 1 },
    });
    expect(logged[0].held).toBeLessThan(charge);
    expect(lines.join("")).not.toContain("img.example");
    expect(lines.join("")).not.toContain("Compare these");
  });
});

describe("nothing raises the provider's bill behind the hold", () => {
  const refused: Record<string, unknown> = {
    service_tier: "priority",
    models: ["openai/gpt-4o", "anthropic/claude-opus-4-7"],
    route: "fallback",
    provider: { order: ["somewhere-else"] },
    plugins: [{ id: "web" }],
    web_search_options: { search_context_size: "high" },
    audio: { voice: "alloy", format: "wav" },
    modalities: ["text", "audio"],
    prediction: { type: "content", content: "x".repeat(1000) },
  };

  test("the list under test is the gateway's whole list", () => {
    expect(Object.keys(refused).sort()).toEqual(Object.keys(REFUSED_FIELDS).sort());
  });

  for (const model of ["standin/echo", "claude/claude-sonnet-4-5"]) {
    for (const [field, value] of Object.entries(refused)) {
      test(`${model}: ${field} → 400 VALIDATION_ERROR naming it; no hold, no provider call`, async () => {
        const { wallet, key } = await gw.newWallet(1);
        const calls = gw.standin.requests.length + gw.anthropic.requests.length;
        for (const stream of [false, true]) {
          const body = { model, messages: [{ role: "user", content: "hi" }], stream, [field]: value };
          expect(await send(gw.openai(key), body)).toEqual({ status: 400, code: "VALIDATION_ERROR" });
          const raw = await gw.call("POST", "/v1/chat/completions", body, { authorization: `Bearer ${key}` });
          expect(raw.status).toBe(400);
          expect(raw.body.error).toBe("VALIDATION_ERROR");
          expect(raw.body.message).toStartWith(`${field} is not accepted`);
        }
        expect(gw.standin.requests.length + gw.anthropic.requests.length).toBe(calls);
        expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
      });
    }
  }

  // Parts whose bill is not in their bytes (an audio's duration, a file's pages) and parts of an unknown type.
  const refusedParts: [string, Record<string, unknown>, string][] = [
    [
      "input_audio",
      {
        role: "user",
        content: [
          { type: "text", text: "hi" },
          { type: "input_audio", input_audio: { data: "UklGRg==", format: "wav" } },
        ],
      },
      'messages[0].content[1]: content part type "input_audio" is not accepted',
    ],
    [
      "file",
      { role: "user", content: [{ type: "file", file: { file_id: "file-abc" } }] },
      'messages[0].content[0]: content part type "file" is not accepted',
    ],
    [
      "file (inline)",
      { role: "user", content: [{ type: "file", file: { filename: "a.pdf", file_data: "data:application/pdf;base64,JVBERi0=" } }] },
      'messages[0].content[0]: content part type "file" is not accepted',
    ],
    [
      "an unknown part type",
      { role: "user", content: [{ type: "video_url", video_url: { url: "https://v.example/a.mp4" } }] },
      'messages[0].content[0]: content part type "video_url" is not accepted',
    ],
    ["a message's audio reference", { role: "assistant", content: null, audio: { id: "audio_abc" } }, "messages[0]: audio is not accepted"],
  ];
  for (const model of ["standin/echo", "claude/claude-sonnet-4-5"]) {
    for (const [name, message, error] of refusedParts) {
      test(`${model}: ${name} → 400 VALIDATION_ERROR naming the part; no hold, no provider call`, async () => {
        const { wallet, key } = await gw.newWallet(1);
        const calls = gw.standin.requests.length + gw.anthropic.requests.length;
        for (const stream of [false, true]) {
          const body = { model, messages: [message, { role: "user", content: "and?" }], stream, max_tokens: 50 };
          expect(await send(gw.openai(key), body)).toEqual({ status: 400, code: "VALIDATION_ERROR" });
          const raw = await gw.call("POST", "/v1/chat/completions", body, { authorization: `Bearer ${key}` });
          expect([raw.status, raw.body.error]).toEqual([400, "VALIDATION_ERROR"]);
          expect(raw.body.message).toStartWith(error);
        }
        expect(gw.standin.requests.length + gw.anthropic.requests.length).toBe(calls);
        expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
      });
    }
  }

  test("cache_control and any other key inside a part, a message or a tool call never reaches the provider", async () => {
    const { key } = await gw.newWallet(1);
    const cache = { cache_control: { type: "ephemeral", ttl: "1h" } };
    const messages = [
      { role: "system", content: [{ type: "text", text: "Be brief.", ...cache }], ...cache },
      {
        role: "user",
        name: "ann",
        content: [
          { type: "text", text: "Compare these.", ...cache },
          { type: "image_url", image_url: { url: IMAGE_URL, detail: "low", ...cache }, ...cache },
        ],
        thinking_blocks: [{ type: "thinking", thinking: "x", signature: "s" }],
      },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "t1", type: "function", function: { name: "f", arguments: "{}", ...cache }, ...cache }],
        ...cache,
      },
      { role: "tool", tool_call_id: "t1", content: [{ type: "text", text: "ok", ...cache }] },
    ];
    await gw.openai(key).chat.completions.create({ model: "standin/vision", messages: messages as any, max_tokens: 50 });
    expect(gw.standin.requests.at(-1)!.messages).toEqual([
      { role: "system", content: [{ type: "text", text: "Be brief." }] },
      {
        role: "user",
        name: "ann",
        content: [
          { type: "text", text: "Compare these." },
          { type: "image_url", image_url: { url: IMAGE_URL, detail: "low" } },
        ],
      },
      { role: "assistant", content: null, tool_calls: [{ id: "t1", type: "function", function: { name: "f", arguments: "{}" } }] },
      { role: "tool", tool_call_id: "t1", content: [{ type: "text", text: "ok" }] },
    ]);
  });

  test("fields named like built-in properties (constructor, toString, __proto__) are unknown fields: dropped, not refused", async () => {
    const { key } = await gw.newWallet(1);
    const body = {
      model: "standin/echo",
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 50,
      constructor: 1,
      toString: "x",
      hasOwnProperty: true,
      ...JSON.parse('{"__proto__": {"a": 1}}'),
    };
    const res = await gw.call("POST", "/v1/chat/completions", body, { authorization: `Bearer ${key}` });
    expect(res.status).toBe(200);
    const upstream = gw.standin.requests.at(-1)!;
    for (const field of ["constructor", "toString", "hasOwnProperty", "__proto__"]) expect(Object.hasOwn(upstream, field)).toBe(false);
  });

  test("tools a provider runs itself (billed per call) are refused, naming the tool", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const calls = gw.standin.requests.length;
    const tools = [{ type: "function", function: { name: "f", parameters: { type: "object", properties: {} } } }, { type: "web_search" }];
    const res = await gw.call(
      "POST",
      "/v1/chat/completions",
      { model: "standin/echo", messages: [{ role: "user", content: "hi" }], tools },
      { authorization: `Bearer ${key}` },
    );
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ error: "VALIDATION_ERROR" });
    expect(res.body.message).toStartWith('tools[1].type "web_search" is not accepted');
    expect(gw.standin.requests.length).toBe(calls);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
  });

  test("the spec's fields and OpenAI's harmless ones reach the provider; unknown ones, store and metadata do not", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const passed = {
      temperature: 0.5,
      top_p: 0.9,
      stop: ["\n\n"],
      presence_penalty: 0.1,
      frequency_penalty: 0.2,
      response_format: { type: "json_object" },
      seed: 7,
      n: 2,
      logprobs: true,
      top_logprobs: 2,
      logit_bias: { "50256": -100 },
      user: "user-1",
      safety_identifier: "hash-1",
      prompt_cache_key: "conversation-1",
      parallel_tool_calls: false,
      tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: {} } } }],
      tool_choice: "auto",
      reasoning_effort: "low",
      verbosity: "low",
      thinking: { type: "enabled", budget_tokens: 1024 },
      top_k: 40,
      modalities: ["text"],
    };
    const dropped = {
      store: true,
      metadata: { team: "a" },
      transforms: ["middle-out"],
      something_new: 1,
      reasoning: { max_tokens: 99_999 },
    };
    const messages = [{ role: "user", content: "hi" }];
    const completion = await gw.openai(key).chat.completions.create({
      model: "standin/echo",
      messages: messages as any,
      max_tokens: 100,
      ...extension({ ...passed, ...dropped }),
    });
    expect(completion.choices[0]!.message.content).toBe(REPLY_WORDS.join(""));
    expect(gw.standin.requests.at(-1)).toEqual({ model: "echo", messages, max_tokens: 100, ...passed });

    const stream = await gw.openai(key).chat.completions.create({
      model: "standin/echo",
      messages: messages as any,
      max_tokens: 100,
      stream: true,
      stream_options: { include_usage: true },
      ...extension(dropped),
    });
    for await (const _ of stream);
    expect(gw.standin.requests.at(-1)).toEqual({
      model: "echo",
      messages,
      max_tokens: 100,
      stream: true,
      stream_options: { include_usage: true },
    });
    const charge = expectedCharge(usageFor(1).prompt_tokens, REPLY_WORDS.length);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000 - 2 * charge, locked: 0 });
  });
});
