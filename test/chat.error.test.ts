import { describe, expect, test } from "bun:test";
import { sharedGateway } from "./helpers/gateway.ts";

// A short deadline so the stand-in's "slow" model (2 s) trips it; a small rate limit to reach 429 quickly.
const gw = sharedGateway({ UPSTREAM_TIMEOUT_MS: "300", RATE_LIMIT_REQUESTS: "5", RATE_LIMIT_WINDOW_S: "60" });

const messages = [{ role: "user", content: "hi" }];
const chat = (key: string | null, body: unknown) =>
  gw.call("POST", "/v1/chat/completions", body, key ? { authorization: `Bearer ${key}` } : {});

/** Asserts the wallet is exactly where it started: balance untouched, nothing locked. */
async function expectUntouched(wallet: string, balance = 1_000_000) {
  expect(await gw.ledgerState(wallet)).toEqual({ balance, locked: 0 });
}

describe("chat completions, every error row", () => {
  test("400 VALIDATION_ERROR: missing messages, bad role, bad max_tokens, not JSON", async () => {
    const { wallet, key } = await gw.newWallet(1);
    for (const body of [
      { model: "standin/echo" },
      { model: "standin/echo", messages: [] },
      { model: "standin/echo", messages: [{ role: "wizard", content: "x" }] },
      { model: "standin/echo", messages, max_tokens: 0 },
      { model: "standin/echo", messages, max_tokens: 1.5 },
      { model: "standin/echo", messages, stream: "yes" },
    ]) {
      const res = await chat(key, body);
      expect(res.status).toBe(400);
      expect(res.body.error).toBe("VALIDATION_ERROR");
      expect(typeof res.body.message).toBe("string");
    }
    const raw = await gw.handle(
      new Request("https://gateway.test/v1/chat/completions", {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: "{not json",
      }),
    );
    expect(raw.status).toBe(400);
    expect((await raw.json()).error).toBe("VALIDATION_ERROR");
    await expectUntouched(wallet);
  });

  test("400 UNKNOWN_MODEL, nothing held or charged", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const res = await chat(key, { model: "nope/nothing", messages });
    expect(res).toMatchObject({ status: 400, body: { error: "UNKNOWN_MODEL" } });
    await expectUntouched(wallet);
  });

  test("401 UNAUTHORIZED: no key, malformed key, unknown key", async () => {
    for (const key of [null, "sk-123", "sk-" + "0".repeat(64)]) {
      const res = await chat(key, { model: "standin/echo", messages });
      expect(res).toMatchObject({ status: 401, body: { error: "UNAUTHORIZED" } });
    }
  });

  test("402 INSUFFICIENT_BALANCE carries the balance and, on this gateway without payment settings, says how credit comes instead of pointing at /v1/topup (503 here); no hold", async () => {
    const { wallet, key } = await gw.newWallet(0);
    await gw.grant(wallet, 100); // 100 µUSDC: far below a 1024-token reserve
    expect(gw.services.config.payments.enabled).toBe(false);
    const res = await chat(key, { model: "standin/echo", messages });
    expect(res.status).toBe(402);
    expect(res.body).toMatchObject({
      error: "INSUFFICIENT_BALANCE",
      message: "Balance cannot cover the estimated cost of this request; this gateway takes no payments: ask its operator for credit",
      available_usdc: 100,
      topup: {
        endpoint: null,
        message: "This gateway takes no payments: its operator grants credit (admin grant) or hands out redeem codes (POST /v1/auth/keys)",
      },
    });
    expect(res.body.required_usdc).toBeGreaterThan(100);
    await expectUntouched(wallet, 100);
  });

  test("402 KEY_BUDGET_EXCEEDED when the key's own budget cannot cover the reserve", async () => {
    const { wallet, key } = await gw.newWallet(1, { budget_usdc: 50 });
    const res = await chat(key, { model: "standin/echo", messages });
    expect(res).toMatchObject({ status: 402, body: { error: "KEY_BUDGET_EXCEEDED" } });
    await expectUntouched(wallet);
  });

  test("upstream 400 → 400 UPSTREAM_CLIENT_ERROR with a fixed message, released", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const res = await chat(key, { model: "standin/fail-400", messages });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "UPSTREAM_CLIENT_ERROR", message: "The model provider rejected the request" });
    await expectUntouched(wallet);
  });

  test("upstream 429 → 429 UPSTREAM_CLIENT_ERROR (not RATE_LIMITED), released", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const res = await chat(key, { model: "standin/fail-429", messages });
    expect(res).toMatchObject({ status: 429, body: { error: "UPSTREAM_CLIENT_ERROR" } });
    expect(JSON.stringify(res.body)).not.toContain("stand-in");
    await expectUntouched(wallet);
  });

  test("upstream 500, unreadable body and refused connection → 502 UPSTREAM_ERROR naming the provider, released", async () => {
    const { wallet, key } = await gw.newWallet(1);
    for (const model of ["standin/fail-500", "standin/garbage", "dead/echo"]) {
      const res = await chat(key, { model, messages });
      expect(res.status).toBe(502);
      // The provider's name is our catalog's; nothing the provider said is passed on.
      const provider = model.split("/")[0];
      expect(res.body).toEqual({ error: "UPSTREAM_ERROR", message: `The model provider "${provider}" failed to answer` });
    }
    await expectUntouched(wallet);
  });

  test("502 also for a stream that fails before its first byte", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const res = await chat(key, { model: "standin/fail-500", messages, stream: true });
    expect(res).toMatchObject({ status: 502, body: { error: "UPSTREAM_ERROR" } });
    await expectUntouched(wallet);
  });

  test("504 UPSTREAM_DEADLINE, JSON and stream, released", async () => {
    const { wallet, key } = await gw.newWallet(1);
    expect(await chat(key, { model: "standin/slow", messages })).toMatchObject({ status: 504, body: { error: "UPSTREAM_DEADLINE" } });
    expect(await chat(key, { model: "standin/slow", messages, stream: true })).toMatchObject({
      status: 504,
      body: { error: "UPSTREAM_DEADLINE" },
    });
    await expectUntouched(wallet);
  });

  test("mid-stream provider failure: 200, in-stream error event, then [DONE]; released", async () => {
    const { wallet, key } = await gw.newWallet(1);
    for (const model of ["standin/stream-error", "standin/stream-break"]) {
      const res = await chat(key, { model, messages, stream: true });
      expect(res.status).toBe(200);
      const events = (res.body as string).split("\n\n").filter(Boolean);
      expect(events.at(-1)).toBe("data: [DONE]");
      expect(JSON.parse(events.at(-2)!.slice(6))).toEqual({
        error: { message: "The model provider failed during the stream", type: "upstream_error" },
      });
      // The chunks before the failure did reach the client.
      expect(events.length).toBeGreaterThan(2);
    }
    await expectUntouched(wallet);
  });

  test("429 RATE_LIMITED per wallet with Retry-After, not charged", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const statuses: number[] = [];
    let limited;
    for (let i = 0; i < 7; i++) {
      const res = await chat(key, { model: "standin/fail-400", messages });
      statuses.push(res.status);
      if (res.status === 429) limited = res;
    }
    // 5 per window pass to the (rejecting) upstream; the rest are refused by the gateway.
    expect(statuses).toEqual([400, 400, 400, 400, 400, 429, 429]);
    expect(limited!.body.error).toBe("RATE_LIMITED");
    expect(Number(limited!.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(limited!.headers.get("x-ratelimit-limit")).toBe("5");
    await expectUntouched(wallet);
  });

  test("unknown route → 404 NOT_FOUND in the error shape", async () => {
    expect(await gw.call("GET", "/v1/nothing")).toMatchObject({ status: 404, body: { error: "NOT_FOUND" } });
  });
});
