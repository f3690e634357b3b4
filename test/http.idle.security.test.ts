/**
 * Idle connections are closed (IDLE_TIMEOUT_S; they were kept for ever), and what may be silent for longer is not
 * cut: a model call waiting on its provider, a stream paused as long as its provider may pause (UPSTREAM_TIMEOUT_MS).
 * On a real port served as main serves it (serverLimits, withRequestTimeouts), with a 1 s idle timeout.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { connect } from "node:net";
import { requestWaitS, serverLimits, withRequestTimeouts } from "../src/requestBody.ts";
import { sharedGateway } from "./helpers/gateway.ts";

const gw = sharedGateway({ IDLE_TIMEOUT_S: "1", UPSTREAM_TIMEOUT_MS: "3000" });
let server: ReturnType<typeof Bun.serve>;

beforeAll(() => {
  const config = gw.services.config;
  server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    ...serverLimits(config.idleTimeoutS),
    fetch: withRequestTimeouts((r) => gw.handle(r), requestWaitS(config)),
  });
});
afterAll(() => server.stop(true));

/** Sends `head` (+ body) on a fresh connection; resolves with what came back and when the server closed it. */
function exchange(head: string, body = "", giveUpMs = 10_000): Promise<{ text: string; closedAfterMs: number | null }> {
  return new Promise((resolve) => {
    let text = "";
    const started = performance.now();
    const socket = connect(server.port!, "127.0.0.1", () => socket.write(head + "\r\n" + body));
    const giveUp = setTimeout(() => {
      socket.destroy();
      resolve({ text, closedAfterMs: null });
    }, giveUpMs);
    socket.on("data", (d) => (text += d.toString()));
    socket.on("error", () => {});
    socket.on("close", () => {
      clearTimeout(giveUp);
      resolve({ text, closedAfterMs: performance.now() - started });
    });
  });
}

const post = (key: string, body: string) =>
  `POST /v1/chat/completions HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`;

describe("idle connections", () => {
  test("a keep-alive connection left idle after its answer is closed within a few seconds (IDLE_TIMEOUT_S=1)", async () => {
    const { text, closedAfterMs } = await exchange("GET /health HTTP/1.1\r\nHost: gateway.test\r\n");
    expect(text).toStartWith("HTTP/1.1 200");
    expect(closedAfterMs).not.toBeNull();
    expect(closedAfterMs!).toBeLessThan(5_000);
  }, 15_000);

  test("a provider silent for 2 s (past the idle timeout) is waited for: the answer arrives", async () => {
    const { key } = await gw.newWallet(1);
    const body = JSON.stringify({ model: "standin/slow", messages: [{ role: "user", content: "hi" }] });
    const { text } = await exchange(post(key, body) + "Connection: close\r\n", body, 15_000);
    expect(text).toStartWith("HTTP/1.1 200");
    expect(text).toContain("Hello from the stand-in");
  }, 20_000);

  test("a stream whose provider goes silent is not cut by the idle timeout: it ends at UPSTREAM_TIMEOUT_MS with its error event and [DONE]", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const body = JSON.stringify({ model: "standin/hang", stream: true, messages: [{ role: "user", content: "hi" }] });
    const { text } = await exchange(post(key, body) + "Connection: close\r\n", body, 15_000);
    expect(text).toStartWith("HTTP/1.1 200");
    expect(text).toContain('"type":"upstream_error"');
    expect(text).toContain("data: [DONE]");
    await gw.services.chat.idle();
    expect((await gw.ledgerState(wallet)).locked).toBe(0);
  }, 20_000);
});
