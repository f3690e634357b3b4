/**
 * A client that keeps a stream open and stops reading holds its credit until the gateway's stream time cap
 * (STREAM_MAX_MS, 2 h by default; 300 ms here). At the cap the stream is charged what it produced (the provider
 * bills that output), not released, and the provider's stream is stopped. What it produced: the words the client
 * took when it was waiting on the provider; the hold's completion part when output sat unread, since the provider
 * may have generated (and billed) all of it meanwhile.
 */
import { describe, expect, test } from "bun:test";
import { countTokens, encodeChat } from "gpt-tokenizer/model/gpt-4o";
import { expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { inputTokensFor, REPLY } from "./helpers/anthropicStandin.ts";
import { REPLY_WORDS, usageFor } from "./helpers/openaiStandin.ts";

const gw = sharedGateway({ STREAM_MAX_MS: "300" });

const messages = [{ role: "user" as const, content: "Tell me a very long story about the sea." }];
// The tokenizer's own count (gpt-tokenizer's GPT-4o chat encoding), what the gateway bills when no usage came.
const PROMPT_COUNT = encodeChat(messages, "gpt-4o").length;

function open(key: string, model: string, maxTokens = 500, n = 1): Promise<Response> {
  return gw.handle(
    new Request("https://gateway.test/v1/chat/completions", {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model, messages, stream: true, max_tokens: maxTokens, n }),
    }),
  );
}

/** Reads until `n` chunks with content arrived; returns the reader (left unread from then on) and their text. */
async function readSome(res: Response, n: number) {
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let buffer = "";
  let text = "";
  for (let seen = 0; seen < n;) {
    const r = await reader.read();
    if (r.done) throw new Error("stream ended early");
    buffer += dec.decode(r.value, { stream: true });
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
  return { reader, text, rest: buffer };
}

async function ledgerRows(wallet: string) {
  await gw.services.flusher.drain();
  return [
    ...(await gw.services.sql<{ type: string; amount_usdc: number; prompt_tokens: number | null; completion_tokens: number | null }[]>`
      SELECT type, amount_usdc, prompt_tokens, completion_tokens FROM ledger_events WHERE wallet = ${wallet} ORDER BY event_id`),
  ];
}

describe("a stream stopped at the gateway's time cap is charged what it produced", () => {
  test("provider silent after three words, client waiting: prompt + the three words charged, upstream stopped, stream ends", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const cancelled = gw.standin.cancelled;
    const res = await open(key, "standin/hang");
    expect(res.status).toBe(200);
    const { reader, text } = await readSome(res, 3);
    expect(text).toBe(REPLY_WORDS.slice(0, 3).join(""));
    expect((await gw.ledgerState(wallet)).locked).toBeGreaterThan(0);

    await gw.standin.cancelledAtLeast(cancelled + 1); // the cap stopped the provider's stream
    await gw.services.chat.idle();
    const charge = expectedCharge(PROMPT_COUNT, countTokens(text));
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charge, locked: 0 });
    expect(await ledgerRows(wallet)).toEqual([
      { type: "charge", amount_usdc: charge, prompt_tokens: PROMPT_COUNT, completion_tokens: countTokens(text) },
    ]);

    // The client's stream ends with [DONE], no error event (nothing failed, nothing was released).
    let tail = "";
    for (let r = await reader.read(); !r.done; r = await reader.read()) tail += new TextDecoder().decode(r.value);
    expect(tail).toBe("data: [DONE]\n\n");
  });

  // The stand-in's "endless" model generates a word every few ms whether or not anyone reads, as a provider does
  // (and bills): a client that stopped taking output is charged the hold's completion part, max_tokens × n.
  test("client stops reading an endless answer: charged the prompt and the completion bound, within the hold; nothing released", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const cancelled = gw.standin.cancelled;
    const res = await open(key, "standin/endless", 4096);
    const { locked } = await gw.ledgerState(wallet);
    await readSome(res, 3); // and then no more reads

    await gw.standin.cancelledAtLeast(cancelled + 1);
    await gw.services.chat.idle();
    const charge = expectedCharge(PROMPT_COUNT, 4096);
    expect(await ledgerRows(wallet)).toEqual([
      { type: "charge", amount_usdc: charge, prompt_tokens: PROMPT_COUNT, completion_tokens: 4096 },
    ]);
    expect(charge).toBeLessThanOrEqual(locked);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charge, locked: 0 });
  });

  test("client never reads past the first chunk of a many-token answer: max_tokens × n charged at the cap", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const cancelled = gw.standin.cancelled;
    const res = await open(key, "standin/endless", 700, 2);
    const reader = res.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toContain('"role":"assistant"');

    await gw.standin.cancelledAtLeast(cancelled + 1);
    await gw.services.chat.idle();
    const charge = expectedCharge(PROMPT_COUNT, 1400);
    expect(await ledgerRows(wallet)).toEqual([
      { type: "charge", amount_usdc: charge, prompt_tokens: PROMPT_COUNT, completion_tokens: 1400 },
    ]);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charge, locked: 0 });
  });

  test("a stream that ends before the cap is charged its usage, and the cap does not fire afterwards", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const res = await open(key, "standin/echo");
    const body = await res.text();
    expect(body.endsWith("data: [DONE]\n\n")).toBe(true);
    const charge = expectedCharge(usageFor(1).prompt_tokens, REPLY_WORDS.length);
    await gw.services.chat.idle();
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charge, locked: 0 });

    // Past the cap of that stream: still exactly one charge, nothing else recorded. (A later stream's own cap
    // fires here, which is the wait: its provider is stopped at 300 ms.)
    const cancelled = gw.standin.cancelled;
    const other = await gw.newWallet(10);
    const hang = await open(other.key, "standin/hang");
    await readSome(hang, 3);
    await gw.standin.cancelledAtLeast(cancelled + 1);
    await gw.services.chat.idle();
    expect(await ledgerRows(wallet)).toEqual([
      { type: "charge", amount_usdc: charge, prompt_tokens: usageFor(1).prompt_tokens, completion_tokens: REPLY_WORDS.length },
    ]);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charge, locked: 0 });
  });

  test("/v1/messages to an Anthropic provider (native): prompt from message_start + the words charged; an error event names the cap", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const cancelled = gw.anthropic.cancelled;
    const res = await gw.handle(
      new Request("https://gateway.test/v1/messages", {
        method: "POST",
        headers: { "x-api-key": key, "content-type": "application/json" },
        body: JSON.stringify({ model: "claude/hang", messages, stream: true, max_tokens: 500 }),
      }),
    );
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let all = "";
    let text = "";
    while ((all.match(/event: content_block_delta\n/g) ?? []).length < 3) {
      const r = await reader.read();
      if (r.done) throw new Error("stream ended early");
      all += dec.decode(r.value, { stream: true });
    }
    for (const m of all.matchAll(/"text_delta","text":"([^"]*)"/g)) text += m[1];
    expect(text).toBe(REPLY.slice(0, 3).join(""));

    await gw.anthropic.cancelledAtLeast(cancelled + 1);
    await gw.services.chat.idle();
    const prompt = inputTokensFor(gw.anthropic.requests.at(-1)!);
    const charge = expectedCharge(prompt, countTokens(text));
    expect(await ledgerRows(wallet)).toEqual([
      { type: "charge", amount_usdc: charge, prompt_tokens: prompt, completion_tokens: countTokens(text) },
    ]);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charge, locked: 0 });
    let tail = "";
    for (let r = await reader.read(); !r.done; r = await reader.read()) tail += dec.decode(r.value);
    expect(tail).toBe(
      'event: error\ndata: {"type":"error","error":{"type":"timeout_error","message":"The stream reached the gateway\'s time limit"}}\n\n',
    );
  });
});
