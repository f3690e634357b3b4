/**
 * The Host header cannot change which route answers. The router reads a path from a fixed offset of the URL Bun
 * builds from Host, so `GET /v1/metrics` with `Host: x` used to answer /metrics (the Prometheus text a proxy rule
 * blocks), `/a/metrics` with `Host: xy` and `/v1/docs/json` with `Host: x` the same. On a real port: a short Host and
 * a missing one (HTTP/1.0) are routed by the path sent; a Host sent twice is 400 (RFC 9112 §3.2).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { connect } from "node:net";
import { serverLimits } from "../src/requestBody.ts";
import { sharedGateway } from "./helpers/gateway.ts";

const gw = sharedGateway();
let server: ReturnType<typeof Bun.serve>;

beforeAll(() => {
  // As main serves it: Bun builds each request's URL from its Host header.
  server = Bun.serve({ port: 0, hostname: "127.0.0.1", ...serverLimits(), fetch: (r) => gw.handle(r) });
});
afterAll(() => server.stop(true));

/** One raw HTTP request (its head as written, then an optional body); the status line's code and the body. */
function raw(head: string, body = ""): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    let text = "";
    // Connection: close, so the answer ends with the connection (an HTTP/1.0 one does anyway).
    const socket = connect(server.port!, "127.0.0.1", () => socket.write(head + "Connection: close\r\n\r\n" + body));
    socket.on("data", (d) => (text += d.toString()));
    socket.on("close", () =>
      resolve({ status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(text)?.[1]), body: text.slice(text.indexOf("\r\n\r\n") + 4) }),
    );
    socket.on("error", reject);
  });
}

describe("Host header", () => {
  test("a normal Host: /v1/metrics, /a/metrics and /v1/docs/json are no routes (404); /metrics is", async () => {
    for (const path of ["/v1/metrics", "/a/metrics", "/v1/docs/json"])
      expect((await raw(`GET ${path} HTTP/1.1\r\nHost: gateway.test\r\n`)).status).toBe(404);
    expect((await raw("GET /metrics HTTP/1.1\r\nHost: gateway.test\r\n")).status).toBe(200);
  });

  test("a short Host routes by the path sent: the same 404s, and a real route still answers", async () => {
    for (const [path, host] of [
      ["/v1/metrics", "x"],
      ["/a/metrics", "xy"],
      ["/v1/docs/json", "x"],
      ["/v1/metrics", "abc"],
      ["/v1/metrics", "x:1"],
    ]) {
      const res = await raw(`GET ${path} HTTP/1.1\r\nHost: ${host}\r\n`);
      expect({ path, host, status: res.status }).toEqual({ path, host, status: 404 });
      expect(JSON.parse(res.body)).toEqual({ error: "NOT_FOUND", message: "No such route" });
    }
    const models = await raw("GET /v1/models?x=1 HTTP/1.1\r\nHost: x\r\n");
    expect(models.status).toBe(200);
    expect(JSON.parse(models.body).object).toBe("list");
    const balance = await raw(`GET /v1/balance/0x${"a".repeat(40)} HTTP/1.1\r\nHost: gw\r\n`);
    expect(JSON.parse(balance.body)).toEqual({ wallet: `0x${"a".repeat(40)}`, available_usdc: 0 });
  });

  test("no Host at all (HTTP/1.0): routed by the path sent", async () => {
    expect((await raw("GET /v1/metrics HTTP/1.0\r\n")).status).toBe(404);
    expect((await raw("GET /v1/abcdefg/metrics HTTP/1.0\r\n")).status).toBe(404); // its 12th character is a "/"
    expect((await raw("GET /health HTTP/1.0\r\n")).status).toBe(200);
  });

  test("a short Host on a POST keeps its body: a chat is served and charged", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const body = JSON.stringify({ model: "standin/echo", messages: [{ role: "user", content: "hi" }] });
    const res = await raw(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`,
      body,
    );
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body).choices[0].message.content).toBe("Hello from the stand-in");
    await gw.services.chat.idle();
    expect((await gw.ledgerState(wallet)).balance).toBeLessThan(1_000_000);
  });

  test("Host sent twice: 400 VALIDATION_ERROR, whatever the path", async () => {
    for (const path of ["/health", "/v1/metrics"]) {
      const res = await raw(`GET ${path} HTTP/1.1\r\nHost: gateway.test\r\nHost: other.example\r\n`);
      expect(res.status).toBe(400);
      expect(JSON.parse(res.body)).toEqual({ error: "VALIDATION_ERROR", message: "Host header sent more than once" });
    }
  });
});
