/**
 * Greedy but well-formed requests against a provider that bills everything it is allowed to (the stand-ins'
 * "greedy" models): every byte of the body it receives as a prompt token, and the whole cap of every choice as
 * output — the larger of max_tokens and max_completion_tokens, its own default (16,384) when no cap comes, `n`
 * times. For each shape: a wallet one µUSDC short of the hold gets 402 INSUFFICIENT_BALANCE and nothing reaches
 * the provider; with exactly the hold it gets 200, is charged exactly what the provider billed, never above the
 * hold, and the cap the gateway sent upstream is the one it held for.
 */
import { describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { holdOverruns } from "../src/billing/overruns.ts";
import { expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { GREEDY_DEFAULT_OUTPUT, REPLY_WORDS } from "./helpers/openaiStandin.ts";

const gw = sharedGateway();

const messages = [
  { role: "system", content: "Answer at length." },
  { role: "user", content: "Write everything you know about token accounting." },
];

/** The catalog's output maximum of every test model (helpers/catalog.ts), far below the provider's own default. */
const MAX_OUTPUT = 4096;

/** Whole-request answers and stream chunks, as the client received them. */
type Received = { completion?: OpenAI.ChatCompletion; chunks?: OpenAI.ChatCompletionChunk[] };

async function send(key: string, body: Record<string, unknown>): Promise<Received> {
  const client = gw.openai(key);
  if (!body.stream) return { completion: await client.chat.completions.create(body as any) };
  const chunks: OpenAI.ChatCompletionChunk[] = [];
  const stream = await client.chat.completions.create({ ...(body as unknown as OpenAI.ChatCompletionCreateParamsStreaming), stream: true });
  for await (const chunk of stream) chunks.push(chunk);
  return { chunks };
}

async function pgCharges(wallet: string) {
  await gw.services.flusher.drain();
  return [
    ...(await gw.services.sql<{ amount_usdc: number; prompt_tokens: number; completion_tokens: number }[]>`
    SELECT amount_usdc, prompt_tokens, completion_tokens FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge'`),
  ];
}

/**
 * The 402 one µUSDC short of the hold, then the 200 with exactly the hold in the wallet: returns the hold, the
 * body the provider received, what it billed and what the client got. Checks that nothing reached the provider
 * before the 200, that the charge is exactly the provider's bill, within the hold, and that nothing stays locked.
 */
async function greedyCall(dialect: "openai" | "anthropic", body: Record<string, unknown>) {
  const provider = dialect === "openai" ? gw.standin : gw.anthropic;
  const overruns = holdOverruns().count;
  const { wallet, key } = await gw.newWallet(0);
  const auth = { authorization: `Bearer ${key}` };
  const sentBefore = provider.requests.length;

  const broke = await gw.call("POST", "/v1/chat/completions", body, auth);
  expect(broke.status).toBe(402);
  expect(broke.body.error).toBe("INSUFFICIENT_BALANCE");
  const hold: number = broke.body.required_usdc;
  await gw.grant(wallet, hold - 1);
  const short = await gw.call("POST", "/v1/chat/completions", body, auth);
  expect(short.status).toBe(402);
  expect(short.body).toMatchObject({ error: "INSUFFICIENT_BALANCE", available_usdc: hold - 1, required_usdc: hold });
  expect(provider.requests.length).toBe(sentBefore); // nothing was sent, nothing billed
  expect(await gw.ledgerState(wallet)).toEqual({ balance: hold - 1, locked: 0 });

  await gw.grant(wallet, 1);
  const received = await send(key, body);
  expect(provider.requests.length).toBe(sentBefore + 1);
  const sent = provider.requests.at(-1)!;
  const upstreamBytes = Buffer.byteLength(JSON.stringify(sent));
  const billed = provider.billed.at(-1)!;
  const [prompt, completion] =
    "prompt_tokens" in billed ? [billed.prompt_tokens, billed.completion_tokens] : [billed.input_tokens, billed.output_tokens];
  expect(prompt).toBe(upstreamBytes); // the greedy provider's prompt bill: every byte it received

  const charge = expectedCharge(prompt, completion);
  expect(charge).toBeLessThanOrEqual(hold);
  await gw.services.chat.idle();
  expect(await gw.ledgerState(wallet)).toEqual({ balance: hold - charge, locked: 0 });
  expect(await pgCharges(wallet)).toEqual([{ amount_usdc: charge, prompt_tokens: prompt, completion_tokens: completion }]);
  expect(holdOverruns().count).toBe(overruns); // the settle stayed within its hold
  return { hold, sent, upstreamBytes, billed: { prompt, completion }, charge, received };
}

describe("OpenAI dialect: a provider that bills every token it may", () => {
  test("max_completion_tokens alone (100,000): sent clamped to 4,096 under its own name, billed and held as such", async () => {
    const r = await greedyCall("openai", { model: "standin/greedy", messages, max_completion_tokens: 100_000 });
    expect(r.sent.max_completion_tokens).toBe(MAX_OUTPUT);
    expect(r.sent.max_tokens).toBeUndefined();
    expect(r.billed.completion).toBe(MAX_OUTPUT);
    expect(r.hold).toBe(expectedCharge(r.upstreamBytes + 8, MAX_OUTPUT));
    expect(r.received.completion!.usage).toMatchObject({ prompt_tokens: r.upstreamBytes, completion_tokens: MAX_OUTPUT });
  });

  test("max_completion_tokens above max_tokens (3,000 beside 200): both sent as 200, the provider bills 200", async () => {
    const r = await greedyCall("openai", { model: "standin/greedy", messages, max_completion_tokens: 3_000, max_tokens: 200 });
    expect([r.sent.max_tokens, r.sent.max_completion_tokens]).toEqual([200, 200]);
    expect(r.billed.completion).toBe(200);
    expect(r.hold).toBe(expectedCharge(r.upstreamBytes + 8, 200));
  });

  test("max_tokens above max_completion_tokens (3,000 beside 200): both sent as 3,000, held as 3,000", async () => {
    const r = await greedyCall("openai", { model: "standin/greedy", messages, max_tokens: 3_000, max_completion_tokens: 200 });
    expect([r.sent.max_tokens, r.sent.max_completion_tokens]).toEqual([3_000, 3_000]);
    expect(r.billed.completion).toBe(3_000);
    expect(r.hold).toBe(expectedCharge(r.upstreamBytes + 8, 3_000));
  });

  test(`no cap at all: the gateway sends its default 1,024, not the provider's own ${GREEDY_DEFAULT_OUTPUT}`, async () => {
    const r = await greedyCall("openai", { model: "standin/greedy", messages });
    expect(r.sent.max_tokens).toBe(1024);
    expect(r.sent.max_completion_tokens).toBeUndefined();
    expect(r.billed.completion).toBe(1024);
    expect(r.hold).toBe(expectedCharge(r.upstreamBytes + 8, 1024));
  });

  test("n = 3 with max_tokens 500: three choices billed 500 each, held 3 × 500", async () => {
    const r = await greedyCall("openai", { model: "standin/greedy", messages, n: 3, max_tokens: 500 });
    expect(r.sent).toMatchObject({ n: 3, max_tokens: 500 });
    expect(r.billed.completion).toBe(1_500);
    expect(r.hold).toBe(expectedCharge(r.upstreamBytes + 8, 1_500));
    expect(r.received.completion!.choices.map((c) => c.message.content)).toEqual(Array(3).fill(REPLY_WORDS.join("")));
  });

  test("reasoning_effort without a cap: the reasoning is billed inside the 1,024 the gateway sent", async () => {
    const r = await greedyCall("openai", { model: "standin/greedy", messages, reasoning_effort: "high" });
    expect(r.sent).toMatchObject({ reasoning_effort: "high", max_tokens: 1024 });
    expect(r.billed.completion).toBe(1024);
    expect(r.received.completion!.usage).toMatchObject({
      completion_tokens: 1024,
      completion_tokens_details: { reasoning_tokens: 1024 - REPLY_WORDS.length },
    });
    expect(r.hold).toBe(expectedCharge(r.upstreamBytes + 8, 1024));
  });

  test("a stream without include_usage: the gateway asks for usage itself, charges it, and the client sees none", async () => {
    const r = await greedyCall("openai", { model: "standin/greedy", messages, stream: true, max_tokens: 2_000 });
    expect(r.sent).toMatchObject({ stream: true, max_tokens: 2_000, stream_options: { include_usage: true } });
    expect(r.billed.completion).toBe(2_000);
    expect(r.hold).toBe(expectedCharge(r.upstreamBytes + 8, 2_000));
    expect(r.received.chunks!.filter((c) => c.usage)).toEqual([]);
    expect(r.received.chunks!.map((c) => c.choices[0]?.delta?.content ?? "").join("")).toBe(REPLY_WORDS.join(""));
  });

  test("a stream with include_usage and no cap: the last chunk carries the provider's usage that was charged", async () => {
    const r = await greedyCall("openai", { model: "standin/greedy", messages, stream: true, stream_options: { include_usage: true } });
    expect(r.sent).toMatchObject({ stream: true, max_tokens: 1024, stream_options: { include_usage: true } });
    expect(r.billed.completion).toBe(1024);
    expect(r.hold).toBe(expectedCharge(r.upstreamBytes + 8, 1024));
    const withUsage = r.received.chunks!.filter((c) => c.usage);
    expect(withUsage).toHaveLength(1);
    expect(r.received.chunks!.at(-1)!.usage).toMatchObject({ prompt_tokens: r.billed.prompt, completion_tokens: 1024 });
  });
});

describe("Anthropic dialect: a provider that bills every token it may", () => {
  test("no cap at all: max_tokens 1,024 goes upstream (Anthropic requires one) and is billed whole", async () => {
    const r = await greedyCall("anthropic", { model: "claude/greedy", messages });
    expect(r.sent.max_tokens).toBe(1024);
    expect(r.billed.completion).toBe(1024);
    expect(r.hold).toBe(expectedCharge(r.upstreamBytes + 8, 1024));
  });

  test("reasoning_effort high with max_completion_tokens 100,000: thinking budgeted inside the clamped 4,096", async () => {
    const r = await greedyCall("anthropic", { model: "claude/greedy", messages, reasoning_effort: "high", max_completion_tokens: 100_000 });
    expect(r.sent).toMatchObject({ max_tokens: MAX_OUTPUT, thinking: { type: "enabled", budget_tokens: Math.floor(MAX_OUTPUT * 0.8) } });
    expect(r.billed.completion).toBe(MAX_OUTPUT);
    expect(r.hold).toBe(expectedCharge(r.upstreamBytes + 8, MAX_OUTPUT));
  });

  test("a stream without include_usage: charged the provider's usage, the client sees none", async () => {
    const r = await greedyCall("anthropic", { model: "claude/greedy", messages, stream: true, max_tokens: 2_000 });
    expect(r.sent).toMatchObject({ stream: true, max_tokens: 2_000 });
    expect(r.billed.completion).toBe(2_000);
    expect(r.hold).toBe(expectedCharge(r.upstreamBytes + 8, 2_000));
    expect(r.received.chunks!.filter((c) => c.usage)).toEqual([]);
  });
});

describe("Messages API to an Anthropic provider (native): a provider that bills every token it may", () => {
  test("the client's body goes as sent; the hold covers its bytes + the tool prompt + the clamped max_tokens, exactly", async () => {
    const body = {
      model: "claude/greedy",
      max_tokens: 100_000,
      system: "Answer at length.",
      messages: [{ role: "user", content: "Write everything you know about token accounting." }],
      tools: [{ name: "note", description: "Write a note", input_schema: { type: "object", properties: { text: { type: "string" } } } }],
      thinking: { type: "enabled", budget_tokens: 2_048 },
      stream: true,
    };
    const open = (key: string) =>
      gw.handle(
        new Request("https://gateway.test/v1/messages", {
          method: "POST",
          headers: { "x-api-key": key, "content-type": "application/json" },
          body: JSON.stringify(body),
        }),
      );
    // What the provider receives and bills; the hold that must cover it is proven below by its edges (one µUSDC
    // short: 402; exactly it: served), not read from `locked` mid-stream (a quick stream has settled by then).
    const rich = await gw.newWallet(10);
    await (await open(rich.key)).text();
    const sent = gw.anthropic.requests.at(-1)!;
    const { model: _id, max_tokens: _cap, ...rest } = body;
    expect(sent).toEqual({ ...rest, model: "greedy", max_tokens: MAX_OUTPUT });
    const bytes = Buffer.byteLength(JSON.stringify(sent));
    expect(gw.anthropic.billed.at(-1)).toEqual({ input_tokens: bytes, output_tokens: MAX_OUTPUT });
    const hold = expectedCharge(bytes + 8 + 600, MAX_OUTPUT);

    // One µUSDC short: 402, nothing sent; exactly the hold: served, charged exactly the provider's bill, within it.
    const overruns = holdOverruns().count;
    const { wallet, key } = await gw.newWallet(0);
    await gw.grant(wallet, hold - 1);
    const sentBefore = gw.anthropic.requests.length;
    const short = await open(key);
    expect(short.status).toBe(402);
    expect(await short.json()).toMatchObject({ type: "error", error: { type: "billing_error" } });
    expect(gw.anthropic.requests.length).toBe(sentBefore);
    await gw.grant(wallet, 1);
    const served = await open(key);
    expect(served.status).toBe(200);
    expect(await served.text()).toContain("event: message_stop");
    await gw.services.chat.idle();
    const charge = expectedCharge(bytes, MAX_OUTPUT);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: hold - charge, locked: 0 });
    expect(await pgCharges(wallet)).toEqual([{ amount_usdc: charge, prompt_tokens: bytes, completion_tokens: MAX_OUTPUT }]);
    expect(holdOverruns().count).toBe(overruns);
  });
});
