/**
 * Requests too big or too slow to serve: a prompt that cannot fit its model's context is 400 before any hold, a
 * body past MAX_BODY_BYTES 413, a body not received within BODY_TIMEOUT_MS (2 s here) 408, and the connection
 * closed. On a real port, hundreds of clients trickling their bodies and streams nobody reads neither starve other
 * clients nor grow memory: the gateway reads a stream's provider only as fast as its client reads.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { connect, type Socket } from "node:net";
import { countTokens } from "gpt-tokenizer/encoding/o200k_base";
import { textTokensAtLeast } from "../src/tariff/index.ts";
import { countTokens as gatewayCount } from "../src/providers/tokens.ts";
import { serverLimits } from "../src/requestBody.ts";
import { expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { REPLY_WORDS, usageFor } from "./helpers/openaiStandin.ts";

const BODY_TIMEOUT_MS = 2_000;
const gw = sharedGateway({ BODY_TIMEOUT_MS: String(BODY_TIMEOUT_MS) });
const CONTEXT = 128_000; // the test catalog's context window

function chat(key: string, body: BodyInit, headers: Record<string, string> = {}) {
  return gw.handle(
    new Request("https://gateway.test/v1/chat/completions", {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
      body,
    }),
  );
}

/** Polls `check` until it holds or `ms` pass (under load background work takes its time). */
async function eventually(check: () => Promise<boolean> | boolean, ms = 15_000, what = "condition"): Promise<void> {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`${what} did not hold within ${ms} ms`);
    await Bun.sleep(50);
  }
}

describe("prompts that cannot fit the context window", () => {
  test("a 24 MB prompt is 400 VALIDATION_ERROR before any hold, though the credit covers its hold; the provider never sees it", async () => {
    const { wallet, key } = await gw.newWallet(100);
    const seen = gw.standin.requests.length;
    const content = "word ".repeat(4_800_000); // 24 MB, 4.8 M words
    const res = await chat(key, JSON.stringify({ model: "standin/echo", messages: [{ role: "user", content }] }));
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({
      error: "VALIDATION_ERROR",
      message: `messages: the prompt is longer than the context window of standin/echo (${CONTEXT} tokens)`,
    });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 100_000_000, locked: 0 });
    expect(gw.standin.requests.length).toBe(seen);
  });

  test("text parts count too; a prompt just past the window by its words is refused, one just inside it is served", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const words = (n: number) => "w ".repeat(n);
    const over = {
      model: "standin/echo",
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: words(CONTEXT - 10) },
            { type: "text", text: words(11) },
          ],
        },
      ],
    };
    const refused = await chat(key, JSON.stringify(over));
    expect(refused.status).toBe(400);
    expect((await refused.json()).error).toBe("VALIDATION_ERROR");
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000, locked: 0 });

    const inside = await chat(key, JSON.stringify({ model: "standin/echo", messages: [{ role: "user", content: words(CONTEXT) }] }));
    expect(inside.status).toBe(200);
    await gw.services.chat.idle();
    expect(await gw.ledgerState(wallet)).toEqual({
      balance: 10_000_000 - expectedCharge(usageFor(1).prompt_tokens, REPLY_WORDS.length),
      locked: 0,
    });
  });

  test("a prompt whose bytes exceed the window but whose tokens may not (long words, runs of spaces) is served, as is a huge max_tokens", async () => {
    const { wallet, key } = await gw.newWallet(10);
    // 300 kB: past the window by the hold's byte bound (the hold stops at the window), ~1,200 words.
    const content = `${"x".repeat(250)}${" ".repeat(250)}`.repeat(600);
    for (const body of [
      { model: "standin/echo", messages: [{ role: "user", content }] },
      { model: "standin/echo", messages: [{ role: "user", content: "hi" }], max_tokens: 10_000_000 },
    ]) {
      const res = await chat(key, JSON.stringify(body));
      expect(res.status).toBe(200);
    }
    await gw.services.chat.idle();
    expect(await gw.ledgerState(wallet)).toEqual({
      balance: 10_000_000 - 2 * expectedCharge(usageFor(1).prompt_tokens, REPLY_WORDS.length),
      locked: 0,
    });
  });

  test("the refusal's count is below a real tokenizer's (o200k_base) on prose, code, CJK, emoji, numbers, base64 and runs", () => {
    const texts = [
      "The quick brown fox jumps over the lazy dog. ".repeat(50),
      "function f(a, b) {\n  return a.map((x) => x * b).filter(Boolean);\n}\n".repeat(40),
      "敏捷的棕色狐狸跳过了懒狗。我们今天去公园散步吧！".repeat(40),
      "🙂🚀 👍🏽 ".repeat(100),
      "3.14159265358979 1234567890 ".repeat(60),
      Buffer.from(crypto.getRandomValues(new Uint8Array(3000))).toString("base64"),
      " ".repeat(5000) + "=".repeat(5000) + "-".repeat(5000) + "a".repeat(5000),
      "a b c d e f g h i j k l m n o p ".repeat(100),
    ];
    for (const text of texts) expect(textTokensAtLeast(text)).toBeLessThanOrEqual(countTokens(text));
  });
});

describe("bodies too large", () => {
  test("a chunked body (no Content-Length) past the limit is 413 at the first byte over it; nothing held", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const limit = gw.services.config.maxBodyBytes;
    const mib = new Uint8Array(1024 * 1024).fill(0x20);
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(ctrl) {
        if (sent > limit + 4 * mib.length) return ctrl.close();
        sent += mib.length;
        ctrl.enqueue(mib);
      },
    });
    const res = await chat(key, body);
    expect(res.status).toBe(413);
    expect(await res.json()).toEqual({ error: "PAYLOAD_TOO_LARGE", message: `Request body too large (at most ${limit} bytes)` });
    expect(sent).toBeLessThanOrEqual(limit + 2 * mib.length); // refused as it arrived, not after all of it
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
  });
});

/** A raw HTTP/1.1 client: what it received and when the connection closed (ms after it connected). */
interface RawClient {
  socket: Socket;
  received: () => string;
  closed: Promise<number>;
}

function rawClient(port: number, head: string, read = true): Promise<RawClient> {
  return new Promise((resolve, reject) => {
    let text = "";
    const started = performance.now();
    let closedAt!: (ms: number) => void;
    const closed = new Promise<number>((r) => (closedAt = r));
    const socket = connect(port, "127.0.0.1", () => {
      socket.write(head);
      if (!read) socket.pause(); // takes nothing: the kernel buffers fill and the sender must wait
      resolve({ socket, received: () => text, closed });
    });
    socket.on("data", (d) => (text += d.toString()));
    socket.on("error", () => {}); // a reset after the answer is a close too
    socket.on("close", () => closedAt(performance.now() - started));
    socket.once("error", reject);
  });
}

function requestHead(key: string, contentLength: number): string {
  return `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${contentLength}\r\n\r\n`;
}

describe("bodies too large, on a real port", () => {
  let server: ReturnType<typeof Bun.serve>;
  beforeAll(() => {
    server = Bun.serve({ port: 0, hostname: "127.0.0.1", ...serverLimits(), fetch: (r) => gw.handle(r) });
  });
  afterAll(() => server.stop(true));

  test.each([
    ["just past the limit", 1],
    ["2 MiB past it", 2 * 1024 * 1024],
    ["10 GiB", 10 * 2 ** 30],
  ])("a Content-Length %s: the spec's 413 body (never Bun's empty one), the connection closed, nothing held", async (_what, past) => {
    const { wallet, key } = await gw.newWallet(1);
    const limit = gw.services.config.maxBodyBytes;
    const length = past >= 2 ** 30 ? past : limit + past;
    const client = await rawClient(server.port!, requestHead(key, length) + "{}");
    await client.closed;
    const [head, body] = client.received().split("\r\n\r\n");
    expect(head).toStartWith("HTTP/1.1 413 ");
    expect(JSON.parse(body!)).toEqual({ error: "PAYLOAD_TOO_LARGE", message: `Request body too large (at most ${limit} bytes)` });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
  });

  test("a chunked body to a route that reads none is not drained: the answer closes the connection", async () => {
    const client = await rawClient(server.port!, "POST /v1/nothing-here HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n");
    const chunk = "x".repeat(64 * 1024);
    let sent = 0;
    const pump = () => {
      if (client.socket.destroyed || sent > 1024 ** 3) return;
      sent += chunk.length;
      if (client.socket.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`)) setImmediate(pump);
      else client.socket.once("drain", pump);
    };
    pump();
    await client.closed;
    // Closed at its answer (a 404, which the reset of a connection with unread bytes may keep from the client),
    // not after the client gave up at 1 GiB.
    expect(sent).toBeLessThan(64 * 1024 * 1024);
  });
});

describe("slow clients on a real port", () => {
  let server: ReturnType<typeof Bun.serve>;
  let origin: string;
  beforeAll(async () => {
    server = Bun.serve({ port: 0, hostname: "127.0.0.1", ...serverLimits(), fetch: (r) => gw.handle(r) });
    origin = `http://127.0.0.1:${server.port}`;
    await gatewayCount("warm"); // the tokenizer's ranks (~70 MB) load once, before memory is measured
  });
  afterAll(() => server.stop(true));

  test("200 bodies trickling and 2 streams never read: others are served at once, tricklers get 408 and are closed, nothing held, memory bounded", async () => {
    const trickler = await gw.newWallet(1);
    const reader = await gw.newWallet(10);
    const streamer = await gw.newWallet(10);
    Bun.gc(true);
    const rssBefore = process.memoryUsage().rss;
    let rssPeak = rssBefore;
    const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, process.memoryUsage().rss)), 100);

    // Streams of a provider that sends as fast as it is read, whose clients read nothing.
    const streamBody = JSON.stringify({
      model: "standin/flood",
      messages: [{ role: "user", content: "Tell me everything." }],
      stream: true,
      max_tokens: 500,
    });
    const floods = () => gw.standin.requests.filter((r) => r.model === "flood").length;
    const floodsBefore = floods();
    const streams = await Promise.all(
      Array.from({ length: 2 }, () =>
        rawClient(server.port!, requestHead(streamer.key, Buffer.byteLength(streamBody)) + streamBody, false),
      ),
    );
    await eventually(() => floods() === floodsBefore + 2, 15_000, "the streams' provider calls");
    const held = (await gw.ledgerState(streamer.wallet)).locked;

    // Tricklers: headers, the start of a body, then a byte every 250 ms of the 2,000 they announced.
    const start = '{"model":"standin/echo","messages":[{"role":"user","content":"';
    const tricklers = await Promise.all(
      Array.from({ length: 200 }, () => rawClient(server.port!, requestHead(trickler.key, 2_000) + start)),
    );
    let tricklersClosed = 0;
    for (const t of tricklers) void t.closed.then(() => tricklersClosed++);
    const drip = setInterval(() => {
      for (const t of tricklers) if (!t.socket.destroyed) t.socket.write("a");
    }, 250);

    // Normal clients meanwhile: 40 chats, 4 at a time, each answered promptly; the first ones while every
    // trickler still holds its connection.
    const latencies: number[] = [];
    const closedWhenAnswered: number[] = [];
    const body = JSON.stringify({ model: "standin/echo", messages: [{ role: "user", content: "hi" }] });
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        for (let i = 0; i < 10; i++) {
          const sent = performance.now();
          const res = await fetch(`${origin}/v1/chat/completions`, {
            method: "POST",
            headers: { authorization: `Bearer ${reader.key}` },
            body,
          });
          expect(res.status).toBe(200);
          expect((await res.json()).choices[0].message.content).toBe(REPLY_WORDS.join(""));
          latencies.push(performance.now() - sent);
          closedWhenAnswered.push(tricklersClosed);
        }
      }),
    );
    expect(latencies.length).toBe(40);
    expect(Math.max(...latencies)).toBeLessThan(5_000);
    expect(closedWhenAnswered.slice(0, 4)).toEqual([0, 0, 0, 0]);

    // Every trickler: 408 in the error shape once its body deadline passed, then its connection closed.
    const closedAfter = await Promise.all(tricklers.map((t) => t.closed));
    clearInterval(drip);
    for (const [i, t] of tricklers.entries()) {
      const answer = t.received();
      expect(answer.startsWith("HTTP/1.1 408 ")).toBe(true);
      expect(JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4))).toEqual({
        error: "REQUEST_TIMEOUT",
        message: `Request body not received within ${BODY_TIMEOUT_MS} ms`,
      });
      expect(closedAfter[i]!).toBeGreaterThanOrEqual(BODY_TIMEOUT_MS - 50);
      expect(closedAfter[i]!).toBeLessThan(BODY_TIMEOUT_MS + 10_000);
    }
    expect(await gw.ledgerState(trickler.wallet)).toEqual({ balance: 1_000_000, locked: 0 });

    // The unread streams: the gateway stopped reading their provider once the sockets' buffers were full.
    let last = -1;
    await eventually(
      async () => {
        const now = gw.standin.flooded;
        const still = now === last;
        last = now;
        if (!still) await Bun.sleep(500);
        return still;
      },
      20_000,
      "the flood to stop",
    );
    expect(gw.standin.flooded).toBeLessThan(2 * 64 * 1024 * 1024);
    clearInterval(sampler);
    const grownMb = (rssPeak - rssBefore) / 1024 / 1024;
    expect(grownMb).toBeLessThan(96);

    // Gone: their holds resolve (charged as unread output, within the hold), none left locked.
    const cancelled = gw.standin.cancelled;
    for (const s of streams) s.socket.destroy();
    await gw.standin.cancelledAtLeast(cancelled + 2);
    await gw.services.chat.idle();
    await eventually(async () => (await gw.ledgerState(streamer.wallet)).locked === 0, 15_000, "the streams' settles");
    const { balance } = await gw.ledgerState(streamer.wallet);
    expect(balance).toBeLessThan(10_000_000);
    expect(10_000_000 - balance).toBeLessThanOrEqual(held);
    expect(await gw.ledgerState(reader.wallet)).toEqual({
      balance: 10_000_000 - 40 * expectedCharge(usageFor(1).prompt_tokens, REPLY_WORDS.length),
      locked: 0,
    });
    console.log(
      `slow clients: chats max ${Math.round(Math.max(...latencies))} ms, tricklers closed after ${Math.round(Math.min(...closedAfter))}–${Math.round(Math.max(...closedAfter))} ms, flood ${(gw.standin.flooded / 1e6).toFixed(1)} MB, RSS +${grownMb.toFixed(1)} MB`,
    );
  }, 90_000);
});
