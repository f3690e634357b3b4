import { describe, expect, test } from "bun:test";
import { countTokens, encodeChat } from "gpt-tokenizer/model/gpt-4o";
import { inputTokensFor, REPLY } from "./helpers/anthropicStandin.ts";
import { expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { LONG_TOOL, LONG_WORDS, REPLY_WORDS } from "./helpers/openaiStandin.ts";

const gw = sharedGateway();

const messages = [
  { role: "system" as const, content: "You are a careful meteorologist." },
  { role: "user" as const, content: "Record today's measurement for Zürich, and explain in detail how you count tokens." },
];

// The tokenizer's own count, computed here with gpt-tokenizer's GPT-4o chat encoding, not the gateway's code.
const PROMPT_COUNT = encodeChat(messages, "gpt-4o").length;
const COMPLETION_COUNT = countTokens(LONG_WORDS.join("")) + countTokens(LONG_TOOL.name) + countTokens(LONG_TOOL.arguments.join(""));

async function pgCharges(wallet: string) {
  await gw.services.flusher.drain();
  return [
    ...(await gw.services.sql<{ amount_usdc: number; prompt_tokens: number; completion_tokens: number }[]>`
    SELECT amount_usdc, prompt_tokens, completion_tokens FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge'`),
  ];
}

/** Within 2 % of the tokenizer's count. */
function expectNear(actual: number, expected: number) {
  expect(Math.abs(actual - expected) / expected).toBeLessThanOrEqual(0.02);
}

function chatRequest(key: string, body: Record<string, unknown>) {
  return new Request("https://gateway.test/v1/chat/completions", {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

/**
 * Reads a raw stream until `n` chunks with content arrived, then goes away. Returns the text received.
 * The stand-in's "hang" models send three words and then nothing, so the provider has produced exactly what the
 * client saw when it leaves.
 */
async function readThenAbort(res: Response, n: number): Promise<string> {
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let buffer = "";
  let text = "";
  let seen = 0;
  while (seen < n) {
    const r = await reader.read();
    if (r.done) throw new Error("stream ended early");
    buffer += dec.decode(r.value);
    const events = buffer.split("\n\n");
    buffer = events.pop()!;
    for (const e of events) {
      const content = JSON.parse(e.slice(6)).choices[0]?.delta?.content;
      if (content) {
        text += content;
        seen++;
      }
    }
  }
  // cancel() resolves once the gateway has stopped the provider and settled the hold.
  await reader.cancel();
  return text;
}

describe("a provider that reports no usage is billed by the tokenizer", () => {
  test("stream with text and a tool call: prompt and completion within 2 % of the tokenizer, balance and Postgres exact", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const stream = await gw.openai(key).chat.completions.create({ model: "standin/no-usage-long", messages, stream: true });
    let text = "";
    let args = "";
    for await (const chunk of stream) {
      expect(chunk.usage ?? undefined).toBeUndefined(); // not asked for: no usage chunk
      text += chunk.choices[0]?.delta?.content ?? "";
      args += chunk.choices[0]?.delta?.tool_calls?.[0]?.function?.arguments ?? "";
    }
    expect(text).toBe(LONG_WORDS.join(""));
    expect(args).toBe(LONG_TOOL.arguments.join(""));

    const rows = await pgCharges(wallet);
    expect(rows).toHaveLength(1);
    const { prompt_tokens, completion_tokens, amount_usdc } = rows[0]!;
    expectNear(prompt_tokens, PROMPT_COUNT);
    expectNear(completion_tokens, COMPLETION_COUNT);
    expect(completion_tokens).toBeGreaterThan(200);
    expect(amount_usdc).toBe(expectedCharge(prompt_tokens, completion_tokens));
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - amount_usdc, locked: 0 });
  });

  test("stream with include_usage: the last chunk before [DONE] carries the counted usage that was charged", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const stream = await gw.openai(key).chat.completions.create({
      model: "standin/no-usage-long",
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(chunks.filter((c) => c.usage)).toHaveLength(1);
    const [row] = await pgCharges(wallet);
    expect(last.usage).toEqual({
      prompt_tokens: row!.prompt_tokens,
      completion_tokens: row!.completion_tokens,
      total_tokens: row!.prompt_tokens + row!.completion_tokens,
      ...({ charge_usdc: row!.amount_usdc } as {}),
    });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - row!.amount_usdc, locked: 0 });
  });

  test("JSON answer: the same count, the same exactness", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const completion = await gw.openai(key).chat.completions.create({ model: "standin/no-usage-long", messages });
    expect(completion.choices[0]!.message.tool_calls?.[0]).toMatchObject({ function: { name: LONG_TOOL.name } });
    const rows = await pgCharges(wallet);
    expect(rows).toHaveLength(1);
    const { prompt_tokens, completion_tokens, amount_usdc } = rows[0]!;
    // The answer carries the usage it was billed at, as the spec's response has it.
    expect(completion.usage).toEqual({
      prompt_tokens,
      completion_tokens,
      total_tokens: prompt_tokens + completion_tokens,
      ...({ charge_usdc: amount_usdc } as {}),
    });
    expectNear(prompt_tokens, PROMPT_COUNT);
    expectNear(completion_tokens, COMPLETION_COUNT);
    expect(amount_usdc).toBe(expectedCharge(prompt_tokens, completion_tokens));
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - amount_usdc, locked: 0 });
  });
});

describe("a client that disconnects pays for what was produced, and no more", () => {
  test("OpenAI dialect: aborted after 3 chunks → prompt + those 3 chunks charged, upstream stopped, hold gone", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const cancelled = gw.standin.cancelled;
    const res = await gw.handle(chatRequest(key, { model: "standin/hang", messages, stream: true, max_tokens: 500 }));
    expect(res.status).toBe(200);
    expect((await gw.ledgerState(wallet)).locked).toBeGreaterThan(0);

    const text = await readThenAbort(res, 3);
    expect(text).toBe(REPLY_WORDS.slice(0, 3).join(""));
    await gw.standin.cancelledAtLeast(cancelled + 1); // the provider's stream was stopped

    // No usage ever came: the prompt and the three words are counted by the tokenizer, exactly.
    const charge = expectedCharge(PROMPT_COUNT, countTokens(text));
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charge, locked: 0 });
    expect(await pgCharges(wallet)).toEqual([{ amount_usdc: charge, prompt_tokens: PROMPT_COUNT, completion_tokens: countTokens(text) }]);
  });

  test("Anthropic dialect: the prompt as message_start counted it, the 3 chunks by the tokenizer; upstream stopped", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const cancelled = gw.anthropic.cancelled;
    const res = await gw.handle(chatRequest(key, { model: "claude/hang", messages, stream: true }));
    expect(res.status).toBe(200);

    const text = await readThenAbort(res, 3);
    expect(text).toBe(REPLY.slice(0, 3).join(""));
    await gw.anthropic.cancelledAtLeast(cancelled + 1); // the provider's stream was stopped

    const prompt = inputTokensFor(gw.anthropic.requests.at(-1)!);
    const charge = expectedCharge(prompt, countTokens(text));
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charge, locked: 0 });
    expect(await pgCharges(wallet)).toEqual([{ amount_usdc: charge, prompt_tokens: prompt, completion_tokens: countTokens(text) }]);
  });

  test("a client that stopped reading, then leaves: the provider generated on meanwhile, the completion bound is charged", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const cancelled = gw.standin.cancelled;
    const res = await gw.handle(chatRequest(key, { model: "standin/endless", messages, stream: true, max_tokens: 300 }));
    const { locked } = await gw.ledgerState(wallet);
    const reader = res.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toContain('"role":"assistant"');
    await gw.standin.generatedAtLeast(gw.standin.generated + 400); // more than max_tokens, none of it read
    await reader.cancel();
    await gw.standin.cancelledAtLeast(cancelled + 1);

    const charge = expectedCharge(PROMPT_COUNT, 300);
    expect(charge).toBeLessThanOrEqual(locked);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charge, locked: 0 });
    expect(await pgCharges(wallet)).toEqual([{ amount_usdc: charge, prompt_tokens: PROMPT_COUNT, completion_tokens: 300 }]);
  });
});

describe("the reserve: a prompt upper bound plus max_tokens clamped to the model's output", () => {
  // Holds are read while a "hang" stream keeps them open; the client then leaves and pays its three words.
  async function holdDuring(key: string, wallet: string, body: Record<string, unknown>): Promise<number> {
    const res = await gw.handle(chatRequest(key, { ...body, stream: true }));
    expect(res.status).toBe(200);
    const { locked } = await gw.ledgerState(wallet);
    await readThenAbort(res, 3);
    expect((await gw.ledgerState(wallet)).locked).toBe(0);
    return locked;
  }

  test("OpenAI dialect: bytes of the upstream body + 8 as prompt tokens, max_tokens clamped to 4,096", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const locked = await holdDuring(key, wallet, { model: "standin/hang", messages, max_tokens: 1_000_000 });
    const sent = gw.standin.requests.at(-1)!;
    expect(sent.max_tokens).toBe(4096);
    expect(locked).toBe(expectedCharge(Buffer.byteLength(JSON.stringify(sent)) + 8, 4096));
  });

  test("max_completion_tokens bounds the hold like max_tokens and goes upstream clamped, under its own name", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const locked = await holdDuring(key, wallet, { model: "standin/hang", messages, max_completion_tokens: 1_000_000 });
    const sent = gw.standin.requests.at(-1)!;
    expect(sent.max_completion_tokens).toBe(4096);
    expect(sent.max_tokens).toBeUndefined();
    expect(locked).toBe(expectedCharge(Buffer.byteLength(JSON.stringify(sent)) + 8, 4096));

    const small = await holdDuring(key, wallet, { model: "standin/hang", messages, max_completion_tokens: 7, max_tokens: 5 });
    const both = gw.standin.requests.at(-1)!;
    expect([both.max_tokens, both.max_completion_tokens]).toEqual([5, 5]);
    expect(small).toBe(expectedCharge(Buffer.byteLength(JSON.stringify(both)) + 8, 5));
  });

  test("Anthropic dialect: tools add the hidden tool-use system prompt (600 tokens) to the bound", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: {} } } }];
    const locked = await holdDuring(key, wallet, { model: "claude/hang", messages, tools, max_tokens: 300 });
    const sent = gw.anthropic.requests.at(-1)!;
    expect(sent.max_tokens).toBe(300);
    expect(locked).toBe(expectedCharge(Buffer.byteLength(JSON.stringify(sent)) + 8 + 600, 300));
  });

  test("a prompt longer than the context window in bytes is bounded by the window (128,000 tokens)", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const long = [{ role: "user", content: "weather ".repeat(25_000) }]; // 200,000 bytes
    const locked = await holdDuring(key, wallet, { model: "claude/hang", messages: long, max_tokens: 100 });
    expect(locked).toBe(expectedCharge(128_000, 100));
  });
});
