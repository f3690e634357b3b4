/**
 * Token counting cannot stall the gateway: the tokenizer's cost grows with the square of one word's length, and it
 * runs on the serving thread, so one 64 KB word used to hold every other request for seconds (count_tokens with a
 * key that has no credit; a streamed answer whose provider reports no usage). Here the worst inputs are counted while
 * /health is asked again and again beside them, in the same process: each /health must answer within a bound (below),
 * which times the serving thread's stall, not the count.
 */
import { describe, expect, test } from "bun:test";
import { BASE, sharedGateway } from "./helpers/gateway.ts";

const gw = sharedGateway();

/**
 * The bound: the CPU time this process spends while one /health waits, at most 200 ms. A count that yields (every
 * 4 ms) lets each /health through after a few ms of CPU. CPU time, not wall time: a loaded machine deschedules the
 * whole process now and then, count or no count, which stretches the wall time of a /health (a wall bound of 200 ms
 * plus twice a quiet spell's slowest /health failed at load average 20) but not its CPU time. A count that does not
 * yield burns seconds of CPU in one turn: 18 s to 482 s on these inputs before the fix, 90 times the bound and more.
 */
const STALL_MS = 200;

/** This process's CPU time (user and system, every thread), ms. */
function cpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

/** Runs `work` while /health is asked back to back beside it; returns its result and the CPU ms spent during each /health. */
async function beside<T>(work: () => Promise<T>): Promise<{ result: T; waits: number[] }> {
  const waits: number[] = [];
  let done = false;
  const running = work().finally(() => (done = true));
  // The first /health goes once the work has had a turn (body parsed, key checked, counting under way).
  await Bun.sleep(0);
  while (!done) {
    const start = cpuMs();
    const res = await gw.handle(new Request(`${BASE}/health`));
    waits.push(cpuMs() - start);
    expect(res.status).toBe(200);
  }
  return { result: await running, waits };
}

const countTokens = (key: string, text: string) =>
  gw.call(
    "POST",
    "/v1/messages/count_tokens",
    { model: "standin/echo", messages: [{ role: "user", content: text }] },
    { "x-api-key": key },
  );

// One word of 100 KB, one of 64 KB, unspaced CJK (a run the tokenizer also sees as one word), and 100 KB of emoji.
const WORST: [string, string, number][] = [
  ["a 100 KB word", "a".repeat(100_000), 12_500],
  ["a 64 KB word", "b".repeat(65_536), 8_192],
  ["100 K characters of unspaced CJK", "漢字かな交じり文".repeat(12_500), 87_500],
  ["100 KB of emoji", "🚀".repeat(25_000), 25_000],
];

describe("count_tokens: the worst inputs never stall the serving thread", () => {
  test("the tokenizer is loaded first (a plain count), so the stall measured below is the count's", async () => {
    const { key } = await gw.newWallet(0);
    const res = await countTokens(key, "Hello there");
    expect(res.status).toBe(200);
    expect(res.body.input_tokens).toBeGreaterThan(0);
  });

  for (const [name, text, tokensAtLeast] of WORST) {
    test(`${name}: counted (an upper bound), while each /health waits at most ${STALL_MS} ms of CPU`, async () => {
      const { key } = await gw.newWallet(0); // no credit needed: counting is free
      const { result, waits } = await beside(() => countTokens(key, text));
      expect(result.status).toBe(200);
      expect(result.body.input_tokens).toBeGreaterThanOrEqual(tokensAtLeast);
      expect(result.body.input_tokens).toBeLessThanOrEqual(Buffer.byteLength(text) + 10);
      expect(waits.length).toBeGreaterThan(0);
      expect(Math.max(...waits)).toBeLessThan(STALL_MS);
    });
  }
});

describe("an answer without provider usage: its count never stalls the serving thread either", () => {
  for (const stream of [true, false]) {
    test(`a 100 KB word to a provider that reports no usage (stream ${stream}): billed its count, each /health within ${STALL_MS} ms of CPU`, async () => {
      const { wallet, key } = await gw.newWallet(10);
      const body = { model: "standin/no-usage", stream, messages: [{ role: "user", content: "a".repeat(100_000) }] };
      const { result, waits } = await beside(async () => {
        const res = await gw.handle(
          new Request(`${BASE}/v1/chat/completions`, {
            method: "POST",
            headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
            body: JSON.stringify(body),
          }),
        );
        const text = await res.text();
        // The charge is counted after the answer: wait for it like the answer's reader would not.
        await gw.services.chat.idle();
        return { status: res.status, text };
      });
      expect(result.status).toBe(200);
      if (stream) expect(result.text).toEndWith("data: [DONE]\n\n");
      expect(Math.max(...waits)).toBeLessThan(STALL_MS);
      const charged = (await gw.ledgerState(wallet)).balance;
      // 12,500 prompt tokens and more (the framing, the reply) at 2.5 USD per 1M: at least 31,250 µUSDC charged.
      expect(10_000_000 - charged).toBeGreaterThanOrEqual(31_250);
    });
  }
});
