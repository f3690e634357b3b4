/**
 * A key's own limits (issue 35): the models it may call (`models`) and its requests per minute
 * (`requests_per_minute`), set at its creation, listed with it, and applied on every model endpoint through the
 * clients a caller would use (the openai SDK for chat, Responses and the model list; Anthropic's for Messages).
 */
import Anthropic, { PermissionDeniedError as AnthropicPermissionDenied } from "@anthropic-ai/sdk";
import { describe, expect, test } from "bun:test";
import { PermissionDeniedError, RateLimitError } from "openai";
import { BASE, expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { usageFor } from "./helpers/openaiStandin.ts";

const gw = sharedGateway();

const START = 1_000_000;
const messages = [{ role: "user" as const, content: "hi" }];
const usage = usageFor(messages.length);
const charge = expectedCharge(usage.prompt_tokens, usage.completion_tokens);

/** What `p` rejects with (a test fails when it resolves). */
async function rejection(p: Promise<unknown>): Promise<any> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  throw new Error("expected a rejection");
}

describe("a key's model allow-list", () => {
  test("the listing shows each key's models and requests_per_minute (null when unrestricted)", async () => {
    const { account, keyId } = await gw.newWallet(0, { models: ["standin/echo", "claude/*"], requests_per_minute: 30 });
    const plain = await gw.call("POST", "/v1/auth/keys", { ...(await gw.signIn(account)), label: "plain" });
    expect(plain.status).toBe(201);
    const list = await gw.call("GET", `/v1/auth/keys?${new URLSearchParams(await gw.signIn(account))}`);
    expect(list.status).toBe(200);
    expect(list.body.data.map((k: Record<string, unknown>) => [k.id, k.models, k.requests_per_minute])).toEqual([
      [keyId, ["standin/echo", "claude/*"], 30],
      [plain.body.id, null, null],
    ]);
  });

  test("an allowed model (by id or provider/*) is served; any other is 403 MODEL_NOT_ALLOWED before any hold, nothing forwarded", async () => {
    const { wallet, key } = await gw.newWallet(1, { models: ["standin/echo", "claude/*"] });
    const client = gw.openai(key);
    const done = await client.chat.completions.create({ model: "standin/echo", messages });
    expect(done.usage).toMatchObject(usage);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - charge, locked: 0 });
    expect((await client.chat.completions.create({ model: "claude/claude-sonnet-4-5", messages, max_tokens: 20 })).model).toBe(
      "claude/claude-sonnet-4-5",
    );
    const after = await gw.ledgerState(wallet);

    const forwarded = gw.standin.requests.length;
    const e = await rejection(client.chat.completions.create({ model: "standin/drip", messages }));
    expect(e).toBeInstanceOf(PermissionDeniedError);
    expect(e.status).toBe(403);
    const raw = await gw.call("POST", "/v1/chat/completions", { model: "standin/drip", messages }, { authorization: `Bearer ${key}` });
    expect(raw).toMatchObject({
      status: 403,
      body: { error: "MODEL_NOT_ALLOWED", message: 'This API key may not call model "standin/drip"' },
    });
    // Streams too, and an unknown model is still UNKNOWN_MODEL.
    const streamed = await rejection(client.chat.completions.create({ model: "standin/echo-not", messages, stream: true }));
    expect(streamed.status).toBe(400);
    expect((await rejection(client.chat.completions.create({ model: "standin/drip", messages, stream: true }))).status).toBe(403);
    expect(gw.standin.requests.length).toBe(forwarded);
    expect(await gw.ledgerState(wallet)).toEqual(after);
  });

  test("Responses and Messages answer 403 in their own shapes", async () => {
    const { wallet, key } = await gw.newWallet(1, { models: ["standin/echo"] });
    const forwarded = gw.anthropic.requests.length;
    const e = await rejection(gw.openai(key).responses.create({ model: "claude/claude-sonnet-4-5", input: "hi" }));
    expect(e).toBeInstanceOf(PermissionDeniedError);
    expect(e.error).toMatchObject({ code: "MODEL_NOT_ALLOWED", type: "permission_error" });

    const anthropic = new Anthropic({ baseURL: BASE, apiKey: key, fetch: gw.fetch, maxRetries: 0 });
    const m = await rejection(anthropic.messages.create({ model: "claude/claude-sonnet-4-5", max_tokens: 10, messages }));
    expect(m).toBeInstanceOf(AnthropicPermissionDenied);
    expect(m.error).toEqual({
      type: "error",
      error: { type: "permission_error", message: 'This API key may not call model "claude/claude-sonnet-4-5"' },
    });
    expect(gw.anthropic.requests.length).toBe(forwarded);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START, locked: 0 });
    // The allowed model answers on the Responses door.
    expect((await gw.openai(key).responses.create({ model: "standin/echo", input: "hi" })).status).toBe("completed");
  });

  test("GET /v1/models with the key's Authorization lists only what it may call; without one, everything", async () => {
    const { key } = await gw.newWallet(0, { models: ["standin/echo", "claude/*"] });
    const all = (await gw.call("GET", "/v1/models")).body.data.map((m: { id: string }) => m.id);
    const listed = [];
    for await (const m of gw.openai(key).models.list()) listed.push(m.id);
    expect(listed).toEqual(all.filter((id: string) => id === "standin/echo" || id.startsWith("claude/")));
    expect(listed.length).toBeGreaterThan(2);
    const unrestricted = await gw.newWallet(0);
    expect((await gw.call("GET", "/v1/models", undefined, { authorization: `Bearer ${unrestricted.key}` })).body.data.length).toBe(
      all.length,
    );
    expect((await gw.call("GET", "/v1/models", undefined, { authorization: `Bearer sk-${"0".repeat(64)}` })).status).toBe(401);
  });
});

describe("a key's requests per minute", () => {
  test("past it: 429 RATE_LIMITED with Retry-After, nothing charged; the wallet's other keys go on", async () => {
    // The key's window slides by the minute: a minute ending between the requests would weigh the first two at
    // less than 2, so the test starts with at least 10 s of its minute left.
    const left = 60_000 - (Date.now() % 60_000);
    if (left < 10_000) await Bun.sleep(left + 10);
    const { wallet, key, account } = await gw.newWallet(1, { requests_per_minute: 2 });
    const client = gw.openai(key);
    await client.chat.completions.create({ model: "standin/echo", messages });
    await client.chat.completions.create({ model: "standin/echo", messages });
    const e = await rejection(client.chat.completions.create({ model: "standin/echo", messages }));
    expect(e).toBeInstanceOf(RateLimitError);
    const raw = await gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages }, { authorization: `Bearer ${key}` });
    expect(raw.status).toBe(429);
    expect(raw.body).toEqual({ error: "RATE_LIMITED", message: "This API key's rate limit of 2 requests per minute exceeded" });
    const retryAfter = Number(raw.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(raw.headers.get("x-ratelimit-limit")).toBe("2");
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - 2 * charge, locked: 0 });

    const other = await gw.call("POST", "/v1/auth/keys", { ...(await gw.signIn(account)), label: "other" });
    const ok = await gw.openai(other.body.key).chat.completions.create({ model: "standin/echo", messages });
    expect(ok.usage).toMatchObject(usage);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - 3 * charge, locked: 0 });
  });
});
