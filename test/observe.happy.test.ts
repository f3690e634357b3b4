/**
 * What an operator sees: /metrics in Prometheus text moving with real requests (JSON chat, stream, 402, 401,
 * provider failures), one access-log line per request with its fields and without secrets, /health per dependency.
 * Real redis-server and Postgres, the openai SDK as client, the OpenAI stand-in as provider.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { setLogLevel, setLogSink } from "../src/log.ts";
import { accessLogIdle } from "../src/observe/trace.ts";
import { BASE, expectedCharge, startGateway, type TestGateway } from "./helpers/gateway.ts";
import { usageFor } from "./helpers/openaiStandin.ts";
import { type Exposition, parsePrometheus } from "./helpers/prometheus.ts";

let gw: TestGateway;
const lines: string[] = [];
beforeAll(async () => {
  gw = await startGateway();
  setLogLevel("info");
  setLogSink((line) => lines.push(line));
}, 60_000);
afterAll(async () => {
  setLogSink(null);
  setLogLevel("error");
  await gw?.close();
});

const messages = [{ role: "user" as const, content: "hi" }];

async function scrape(): Promise<Exposition> {
  const res = await gw.handle(new Request(`${BASE}/metrics`));
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toStartWith("text/plain; version=0.0.4");
  return parsePrometheus(await res.text());
}

/** Sum of the samples of `name` whose labels include `labels` (for a histogram, name its _count). */
function value(e: Exposition, name: string, labels: Record<string, string> = {}): number {
  if (!e.types.has(name.replace(/_count$/, ""))) throw new Error(`metric ${name} not exported`);
  const matching = e.samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  return matching.reduce((a, s) => a + s.value, 0);
}

function delta(before: Exposition, after: Exposition, name: string, labels: Record<string, string> = {}): number {
  return value(after, name, labels) - value(before, name, labels);
}

const CHAT = "/v1/chat/completions";
async function accessLines() {
  await accessLogIdle();
  return lines.map((l) => JSON.parse(l)).filter((l) => l.msg === "request");
}
/** The status of an SDK call that must fail. */
const failure = (p: Promise<unknown>) =>
  p.then(
    () => 0,
    (e: { status?: number }) => e.status,
  );

describe("/metrics", () => {
  test("counters move with a JSON chat, a stream, a 402 and a 401; settles and latency are counted", async () => {
    const payer = await gw.newWallet(1);
    const broke = await gw.newWallet(0);
    await accessLogIdle();
    const before = await scrape();

    await gw.openai(payer.key).chat.completions.create({ model: "standin/echo", messages });
    const stream = await gw.openai(payer.key).chat.completions.create({ model: "standin/echo", messages, stream: true });
    for await (const _ of stream);
    expect(await failure(gw.openai(broke.key).chat.completions.create({ model: "standin/echo", messages }))).toBe(402);
    expect(await failure(gw.openai(`sk-${"0".repeat(64)}`).chat.completions.create({ model: "standin/echo", messages }))).toBe(401);
    await gw.services.chat.idle();
    await accessLogIdle();

    const after = await scrape();
    const requests = (status: string) => delta(before, after, "gateway_http_requests_total", { method: "POST", route: CHAT, status });
    expect([requests("200"), requests("402"), requests("401")]).toEqual([2, 1, 1]);
    expect(delta(before, after, "gateway_reserves_total", { outcome: "ok" })).toBe(2);
    expect(delta(before, after, "gateway_reserves_total", { outcome: "INSUFFICIENT_BALANCE" })).toBe(1);
    expect(delta(before, after, "gateway_settles_total", { outcome: "charged" })).toBe(2);
    expect(delta(before, after, "gateway_chat_added_latency_seconds_count", { stream: "false" })).toBe(1);
    expect(delta(before, after, "gateway_chat_added_latency_seconds_count", { stream: "true" })).toBe(1);
    expect(delta(before, after, "gateway_upstream_latency_seconds_count", { provider: "standin" })).toBe(2);
    expect(delta(before, after, "gateway_http_request_duration_seconds_count", { route: CHAT })).toBe(4);
    // Settled: nothing of these requests stays open in this process.
    expect(delta(before, after, "gateway_holds_open")).toBe(0);
    expect(delta(before, after, "gateway_locked_usdc")).toBe(0);
    expect(value(after, "gateway_redis_up")).toBe(1);
    expect(value(after, "gateway_postgres_up")).toBe(1);
  });

  test("an open hold shows in process and in Redis until it is released", async () => {
    const { wallet, keyId } = await gw.newWallet(1);
    const p = gw.services.ledger.principal(keyId, wallet);
    const before = await scrape();
    const holdId = crypto.randomUUID();
    await gw.services.ledger.reserve(p, holdId, 12_345);
    const held = await scrape();
    expect(delta(before, held, "gateway_holds_open")).toBe(1);
    expect(delta(before, held, "gateway_locked_usdc")).toBe(12_345);
    expect(delta(before, held, "gateway_ledger_holds")).toBe(1);

    await gw.services.ledger.release(p, holdId);
    const released = await scrape();
    expect(delta(before, released, "gateway_holds_open")).toBe(0);
    expect(delta(before, released, "gateway_locked_usdc")).toBe(0);
    expect(delta(before, released, "gateway_ledger_holds")).toBe(0);
    expect(delta(held, released, "gateway_releases_total", { reason: "release" })).toBe(1);
  });

  test("outbox length and lag until the flusher writes the batch; flusher batches counted", async () => {
    await gw.services.flusher.drain();
    const { key } = await gw.newWallet(1);
    await gw.openai(key).chat.completions.create({ model: "standin/echo", messages });
    await gw.services.chat.idle();
    const queued = await scrape();
    expect(value(queued, "gateway_outbox_entries")).toBeGreaterThanOrEqual(1);
    expect(value(queued, "gateway_outbox_lag_seconds")).toBeGreaterThanOrEqual(0);

    await gw.services.flusher.drain();
    const flushed = await scrape();
    expect(value(flushed, "gateway_outbox_entries")).toBe(0);
    expect(value(flushed, "gateway_outbox_lag_seconds")).toBe(0);
    expect(delta(queued, flushed, "gateway_flusher_batches_total")).toBeGreaterThanOrEqual(1);
    expect(delta(queued, flushed, "gateway_flusher_events_total")).toBeGreaterThanOrEqual(1);
  });

  test("a deferred settle shows as pending until the repair job posts it", async () => {
    const { wallet, keyId } = await gw.newWallet(1);
    const p = gw.services.ledger.principal(keyId, wallet);
    const holdId = crypto.randomUUID();
    await gw.services.ledger.reserve(p, holdId, 10_000);
    const before = await scrape();
    const details = { promptTokens: 1, completionTokens: 1, costMicro: 1, model: "standin/echo" };
    await gw.services.pendingSettles.record({ holdId, wallet, keyId, charge: 5_000, details });
    const pending = await scrape();
    expect(value(pending, "gateway_pending_settles")).toBe(1);
    expect(delta(before, pending, "gateway_settles_deferred_total")).toBe(1);

    await gw.services.pendingSettles.replay();
    const posted = await scrape();
    expect(value(posted, "gateway_pending_settles")).toBe(0);
    expect(value(posted, "gateway_payment_checks_open")).toBe(0);
  });

  test("provider failures are counted by provider and status and logged with a truncated body", async () => {
    const { key } = await gw.newWallet(1);
    const before = await scrape();
    await accessLogIdle();
    lines.length = 0;
    expect(await failure(gw.openai(key).chat.completions.create({ model: "standin/fail-500", messages }))).toBe(502);
    const broken = await gw.openai(key).chat.completions.create({ model: "standin/stream-break", messages, stream: true });
    // The SDK raises the in-stream error event.
    expect(
      await (async () => {
        for await (const _ of broken);
      })().then(
        () => "ended",
        () => "error event",
      ),
    ).toBe("error event");
    await gw.services.chat.idle();
    const after = await scrape();
    expect(delta(before, after, "gateway_upstream_errors_total", { provider: "standin", status: "500" })).toBe(1);
    expect(delta(before, after, "gateway_upstream_errors_total", { provider: "standin", status: "stream_broken" })).toBe(1);

    const warned = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === "upstream failure");
    expect(warned).toHaveLength(2);
    expect(warned[0]).toMatchObject({ level: "warn", provider: "standin", model: "standin/fail-500", status: "500", upstream_status: 500 });
    expect(warned[0].body).toContain("stand-in 500");
    expect(warned[0].body.length).toBeLessThanOrEqual(500);
    expect(warned[1]).toMatchObject({ level: "warn", provider: "standin", model: "standin/stream-break", status: "stream_broken" });
  });
});

describe("access log", () => {
  test("one line per request: request id (as X-Request-Id), route pattern, status, latency, key, wallet, model, charge", async () => {
    const { key, keyId, wallet } = await gw.newWallet(1);
    await accessLogIdle();
    lines.length = 0;
    const res = await gw.call("POST", CHAT, { model: "standin/echo", messages }, { authorization: `Bearer ${key}` });
    expect(res.status).toBe(200);
    const stream = await gw.openai(key).chat.completions.create({ model: "standin/echo", messages, stream: true });
    for await (const _ of stream);
    await gw.services.chat.idle();

    const logged = await accessLines();
    expect(logged).toHaveLength(2);
    const usage = usageFor(1);
    const charge = expectedCharge(usage.prompt_tokens, usage.completion_tokens);
    expect(logged[0]).toMatchObject({
      level: "info",
      request_id: res.headers.get("x-request-id"),
      method: "POST",
      route: CHAT,
      status: 200,
    });
    expect(logged[0]).toMatchObject({ key_id: keyId, wallet, model: "standin/echo", charge_usdc: charge });
    expect(logged[0].latency_ms).toBeNumber();
    expect(logged[0].upstream_ms).toBeLessThanOrEqual(logged[0].latency_ms);
    // The stream's line is written at its end, with its charge.
    expect(logged[1]).toMatchObject({ route: CHAT, status: 200, stream: true, key_id: keyId, charge_usdc: charge });
    expect(logged[1].duration_ms).toBeGreaterThanOrEqual(logged[1].latency_ms);
  });

  test("the front doors are observed as chat: /v1/messages (native and translated) and /v1/responses, JSON and streams", async () => {
    const { key, keyId, wallet } = await gw.newWallet(1);
    const auth = { authorization: `Bearer ${key}` };
    await accessLogIdle();
    const before = await scrape();
    await accessLogIdle();
    lines.length = 0;
    const calls: [string, Record<string, unknown>][] = [
      ["/v1/messages", { model: "claude/claude-sonnet-4-5", max_tokens: 50, messages }],
      ["/v1/messages", { model: "claude/claude-sonnet-4-5", max_tokens: 50, messages, stream: true }],
      ["/v1/messages", { model: "standin/echo", max_tokens: 50, messages }],
      ["/v1/responses", { model: "claude/claude-sonnet-4-5", input: "hi", stream: true }],
    ];
    const charges: number[] = [];
    for (const [path, body] of calls) {
      const balance = (await gw.ledgerState(wallet)).balance;
      const res = await gw.handle(
        new Request(BASE + path, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body: JSON.stringify(body) }),
      );
      expect(res.status).toBe(200);
      await res.text();
      await gw.services.chat.idle();
      charges.push(balance - (await gw.ledgerState(wallet)).balance);
    }
    const logged = await accessLines();
    const after = await scrape();
    expect(charges.every((c) => c > 0)).toBe(true);
    expect(logged.map((l) => [l.route, l.model, l.stream ?? false, l.charge_usdc])).toEqual(
      calls.map(([path, body], i) => [path, body.model, body.stream ?? false, charges[i]]),
    );
    for (const l of logged) expect(l).toMatchObject({ status: 200, key_id: keyId, wallet, upstream_ms: expect.any(Number) });
    const requests = (route: string) => delta(before, after, "gateway_http_requests_total", { method: "POST", route, status: "200" });
    expect([requests("/v1/messages"), requests("/v1/responses")]).toEqual([3, 1]);
    expect(delta(before, after, "gateway_upstream_latency_seconds_count", { provider: "claude" })).toBe(3);
    expect(delta(before, after, "gateway_upstream_latency_seconds_count", { provider: "standin" })).toBe(1);
    expect(delta(before, after, "gateway_chat_added_latency_seconds_count")).toBe(4);
    expect(delta(before, after, "gateway_reserves_total", { outcome: "ok" })).toBe(4);
    expect(delta(before, after, "gateway_settles_total", { outcome: "charged" })).toBe(4);
  });

  test("errors and unknown routes are logged with their status; the route is the pattern, never the raw path", async () => {
    const { key, wallet } = await gw.newWallet(0);
    await accessLogIdle();
    lines.length = 0;
    expect((await gw.call("POST", CHAT, { model: "standin/echo", messages }, { authorization: `Bearer ${key}` })).status).toBe(402);
    expect((await gw.call("GET", `/v1/topups/${wallet}?api_key=${key}`)).status).toBe(200);
    expect((await gw.call("GET", "/no/such/route")).status).toBe(404);
    const logged = await accessLines();
    expect(logged.map((l) => [l.route, l.status])).toEqual([
      [CHAT, 402],
      ["/v1/topups/:wallet", 200],
      ["unmatched", 404],
    ]);
    expect(logged[1].wallet).toBe(wallet);
  });

  test("no line carries an API key, a SIWE message or a signature", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    await accessLogIdle();
    lines.length = 0;
    const signed = await gw.signIn(account);
    const created = await gw.call("POST", "/v1/auth/keys", { ...signed, label: "log test" });
    expect(created.status).toBe(201);
    const listing = await gw.signIn(account);
    const query = new URLSearchParams(listing).toString();
    expect((await gw.call("GET", `/v1/auth/keys?${query}`)).status).toBe(200);
    const key: string = created.body.key;
    const wallet = account.address.toLowerCase();
    expect((await gw.call("GET", `/v1/usage/${wallet}`, undefined, { authorization: `Bearer ${key}` })).status).toBe(200);
    expect((await gw.call("GET", `/v1/topups/${wallet}?api_key=${key}`)).status).toBe(200);
    expect((await gw.call("POST", CHAT, { model: "standin/echo", messages }, { authorization: `Bearer ${key}` })).status).toBe(402);

    const logged = await accessLines();
    expect(logged.map((l) => l.route)).toEqual(["/v1/auth/keys", "/v1/auth/keys", "/v1/usage/:wallet", "/v1/topups/:wallet", CHAT]);
    expect(logged[0]).toMatchObject({ status: 201, wallet });
    const text = lines.join("\n");
    for (const secret of [
      key,
      key.slice(3),
      signed.signature.slice(2, 40),
      listing.signature.slice(2, 40),
      "wants you to sign in",
      "Sign in to the gateway",
    ]) {
      expect(text).not.toContain(secret);
    }
  });

  test("a client's X-Request-Id is echoed when it is a plain token, replaced otherwise", async () => {
    const mine = await gw.handle(new Request(`${BASE}/health`, { headers: { "x-request-id": "lb-1234.abc" } }));
    expect(mine.headers.get("x-request-id")).toBe("lb-1234.abc");
    const odd = await gw.handle(new Request(`${BASE}/health`, { headers: { "x-request-id": 'a b"c' } }));
    expect(odd.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
  });
});

describe("/health", () => {
  test("keeps {status} and adds each dependency's state", async () => {
    expect(await gw.call("GET", "/health")).toMatchObject({ status: 200, body: { status: "ok", redis: "up", postgres: "up" } });
  });
});
