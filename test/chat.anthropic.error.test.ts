import { describe, expect, test } from "bun:test";
import { APIError } from "openai";
import { REPLY } from "./helpers/anthropicStandin.ts";
import { expectedCharge, sharedGateway } from "./helpers/gateway.ts";

// A short deadline so the stand-in's "slow" (2 s) and "hang" models trip it.
const gw = sharedGateway({ UPSTREAM_TIMEOUT_MS: "300" });

const messages = [{ role: "user", content: "hi" }];
const chat = (key: string, body: unknown) => gw.call("POST", "/v1/chat/completions", body, { authorization: `Bearer ${key}` });

/** Asserts the wallet is exactly where it started: balance untouched, nothing locked. */
async function expectUntouched(wallet: string, balance = 1_000_000) {
  expect(await gw.ledgerState(wallet)).toEqual({ balance, locked: 0 });
}

async function pgEvents(wallet: string) {
  await gw.services.flusher.drain();
  return [...(await gw.services.sql<{ type: string }[]>`SELECT type FROM ledger_events WHERE wallet = ${wallet} ORDER BY occurred_at`)].map(
    (r) => r.type,
  );
}

const REJECTED = { error: "UPSTREAM_CLIENT_ERROR", message: "The model provider rejected the request" };
const FAILED = { error: "UPSTREAM_ERROR", message: 'The model provider "claude" failed to answer' };

describe("Anthropic errors → the spec's error rows, hold released", () => {
  test("529 overloaded_error → 502 UPSTREAM_ERROR, JSON and stream", async () => {
    const { wallet, key } = await gw.newWallet(1);
    expect(await chat(key, { model: "claude/overloaded", messages })).toMatchObject({ status: 502, body: FAILED });
    expect(await chat(key, { model: "claude/overloaded", messages, stream: true })).toMatchObject({ status: 502, body: FAILED });
    await expectUntouched(wallet);
    expect(await pgEvents(wallet)).toEqual(["release", "release"]);
  });

  test("500 api_error → 502 UPSTREAM_ERROR", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const res = await chat(key, { model: "claude/api-error", messages });
    expect(res.status).toBe(502);
    expect(res.body).toEqual(FAILED);
    await expectUntouched(wallet);
  });

  test("429 rate_limit_error → 429 UPSTREAM_CLIENT_ERROR (not RATE_LIMITED), no upstream text", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const res = await chat(key, { model: "claude/rate-limited", messages });
    expect(res.status).toBe(429);
    expect(res.body).toEqual(REJECTED);
    expect(JSON.stringify(res.body)).not.toContain("per-minute");
    await expectUntouched(wallet);
  });

  test("400 invalid_request_error → 400 UPSTREAM_CLIENT_ERROR, seen by the SDK as a 400 with our code", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const err = await gw
      .openai(key)
      .chat.completions.create({ model: "claude/invalid", messages: [{ role: "user", content: "hi" }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(APIError);
    expect((err as APIError).status).toBe(400);
    expect((err as APIError).error).toBe("UPSTREAM_CLIENT_ERROR");
    expect(String((err as APIError).message)).not.toContain("prompt is too long");
    await expectUntouched(wallet);
  });

  test("a request Anthropic would refuse is refused by the gateway first: 400 VALIDATION_ERROR, no hold", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const model = "claude/claude-sonnet-4-5";
    for (const body of [
      { model, messages, n: 2 },
      { model, messages, tools: [{ type: "web_search" }] },
      { model, messages, tools: [{ type: "function", function: { name: "f" } }], tool_choice: "sometimes" },
      { model, messages: [{ role: "user", content: [{ type: "input_audio", input_audio: { data: "AAAA", format: "wav" } }] }] },
      {
        model,
        messages: [
          { role: "user", content: "hi" },
          { role: "assistant", content: null, tool_calls: [{ id: "t1", type: "function", function: { name: "f", arguments: "[1, 2]" } }] },
          { role: "tool", tool_call_id: "t1", content: "ok" },
        ],
      },
      { model, messages: [{ role: "tool", content: "no id" }] },
    ]) {
      const res = await chat(key, body);
      expect([res.status, res.body.error]).toEqual([400, "VALIDATION_ERROR"]);
      expect(typeof res.body.message).toBe("string");
    }
    await expectUntouched(wallet);
    expect(gw.anthropic.requests.filter((r) => r.model === "claude-sonnet-4-5")).toHaveLength(0);
  });

  test("overloaded_error event mid-stream: 200, the words before it, the spec's error event, [DONE]; released", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const res = await chat(key, { model: "claude/stream-overloaded", messages, stream: true });
    expect(res.status).toBe(200);
    const events = (res.body as string).split("\n\n").filter(Boolean);
    expect(events.at(-1)).toBe("data: [DONE]");
    expect(JSON.parse(events.at(-2)!.slice(6))).toEqual({
      error: { message: "The model provider failed during the stream", type: "upstream_error" },
    });
    const text = events
      .slice(0, -2)
      .map((e) => JSON.parse(e.slice(6)).choices[0].delta.content ?? "")
      .join("");
    expect(text).toBe(REPLY.slice(0, 2).join(""));
    expect(res.body).not.toContain("Overloaded");
    await expectUntouched(wallet);
    expect(await pgEvents(wallet)).toEqual(["release"]);
  });

  test("504 UPSTREAM_DEADLINE when no answer comes in time, JSON and stream", async () => {
    const { wallet, key } = await gw.newWallet(1);
    expect(await chat(key, { model: "claude/slow", messages })).toMatchObject({ status: 504, body: { error: "UPSTREAM_DEADLINE" } });
    expect(await chat(key, { model: "claude/slow", messages, stream: true })).toMatchObject({
      status: 504,
      body: { error: "UPSTREAM_DEADLINE" },
    });
    expect(await chat(key, { model: "claude/hang", messages })).toMatchObject({ status: 504, body: { error: "UPSTREAM_DEADLINE" } });
    await expectUntouched(wallet);
  });

  test("a stream that goes idle past the deadline ends with the in-stream error event; upstream stopped, released", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const cancelledBefore = gw.anthropic.cancelled;
    const res = await chat(key, { model: "claude/hang", messages, stream: true });
    expect(res.status).toBe(200);
    const events = (res.body as string).split("\n\n").filter(Boolean);
    expect(events.at(-1)).toBe("data: [DONE]");
    expect(JSON.parse(events.at(-2)!.slice(6)).error.type).toBe("upstream_error");
    // role chunk and three words made it out before the silence
    expect(
      events
        .slice(0, -2)
        .map((e) => JSON.parse(e.slice(6)).choices[0].delta.content)
        .join(""),
    ).toBe(REPLY.slice(0, 3).join(""));
    await gw.anthropic.cancelledAtLeast(cancelledBefore + 1); // the provider's stream was stopped
    await expectUntouched(wallet);
  });

  test("a client that reads slowly is not an idle upstream: the whole answer, charged exactly", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const res = await gw.handle(
      new Request("https://gateway.test/v1/chat/completions", {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "claude/claude-sonnet-4-5", messages, stream: true }),
      }),
    );
    // The client pauses longer than the upstream deadline (300 ms) before it reads, while the gateway holds the
    // first upstream read in its queue and so reads no further.
    await Bun.sleep(600);
    const reader = res.body!.getReader();
    let text = "";
    for (let r = await reader.read(); !r.done; r = await reader.read()) text += new TextDecoder().decode(r.value);
    expect(text).not.toContain("upstream_error");
    expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
    const prompt = 10 * 1 + 3; // the stand-in's count for one user message
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000 - expectedCharge(prompt, REPLY.length), locked: 0 });
  });
});
