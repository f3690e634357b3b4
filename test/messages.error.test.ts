/**
 * POST /v1/messages failures as Anthropic's SDK sees them: each error in Anthropic's shape with the gateway's
 * status, so the SDK raises its matching class with the gateway's message; what the wallet and the books keep.
 */
import Anthropic, {
  APIError,
  AuthenticationError,
  BadRequestError,
  InternalServerError,
  PaymentRequiredError,
  RateLimitError,
} from "@anthropic-ai/sdk";
import { describe, expect, test } from "bun:test";
import { REPLY } from "./helpers/anthropicStandin.ts";
import { leaveStreamAfter } from "./helpers/disconnect.ts";
import { BASE, sharedGateway, startGateway } from "./helpers/gateway.ts";

const gw = sharedGateway();

const START = 1_000_000;
const messages: Anthropic.MessageParam[] = [{ role: "user", content: "hi" }];

function anthropic(apiKey: string, gateway = gw): Anthropic {
  return new Anthropic({ baseURL: BASE, apiKey, fetch: gateway.fetch, maxRetries: 0 });
}

/** What `p` rejects with (a test fails when it resolves). */
async function rejection(p: Promise<unknown>): Promise<any> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  throw new Error("expected a rejection");
}

async function pgEvents(wallet: string) {
  await gw.services.flusher.drain();
  return [
    ...(await gw.services.sql<
      { type: string }[]
    >`SELECT type FROM ledger_events WHERE wallet = ${wallet} AND type <> 'grant' ORDER BY occurred_at`),
  ].map((r) => r.type);
}

describe("request errors → Anthropic's error classes", () => {
  test("400 invalid_request_error: max_tokens missing, an unknown model, a provider-run tool; nothing held", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const client = anthropic(key);
    const noMax = await rejection(
      client.messages.create({ model: "standin/echo", messages } as unknown as Anthropic.MessageCreateParamsNonStreaming),
    );
    expect(noMax).toBeInstanceOf(BadRequestError);
    expect(noMax.status).toBe(400);
    expect(noMax.error).toEqual({
      type: "error",
      error: { type: "invalid_request_error", message: "max_tokens: Field required (a positive integer)" },
    });

    const unknown = await rejection(client.messages.create({ model: "nope/none", max_tokens: 10, messages }));
    expect(unknown).toBeInstanceOf(BadRequestError);
    expect(unknown.type).toBe("invalid_request_error");
    expect(unknown.error.error.message).toContain("nope/none");

    const server = await rejection(
      client.messages.create({
        model: "claude/claude-sonnet-4-5",
        max_tokens: 10,
        messages,
        tools: [{ type: "web_search_20250305", name: "web_search" }],
      }),
    );
    expect(server).toBeInstanceOf(BadRequestError);
    expect(server.error.error.message).toStartWith('tools.0.type "web_search_20250305" is not accepted');

    const badJson = await gw.handle(new Request(`${BASE}/v1/messages`, { method: "POST", headers: { "x-api-key": key }, body: "{nope" }));
    expect(badJson.status).toBe(400);
    expect(await badJson.json()).toEqual({ type: "error", error: { type: "invalid_request_error", message: "Body is not valid JSON" } });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START, locked: 0 });
  });

  test("401 authentication_error: no key, an unknown key (Bearer or x-api-key), on both routes", async () => {
    const unknownKey = "sk-" + "0".repeat(64);
    const e = await rejection(anthropic(unknownKey).messages.create({ model: "standin/echo", max_tokens: 10, messages }));
    expect(e).toBeInstanceOf(AuthenticationError);
    expect(e.error).toEqual({ type: "error", error: { type: "authentication_error", message: "Missing or invalid credentials" } });
    expect(await rejection(anthropic(unknownKey).messages.countTokens({ model: "standin/echo", messages }))).toBeInstanceOf(
      AuthenticationError,
    );
    const raw = await gw.call("POST", "/v1/messages", { model: "standin/echo", max_tokens: 10, messages }, { "x-api-key": "nope" });
    expect(raw).toMatchObject({ status: 401, body: { type: "error", error: { type: "authentication_error" } } });
    expect(raw.headers.get("x-request-id")).toBeTruthy();
    expect((await gw.call("POST", "/v1/messages/count_tokens", { model: "standin/echo", messages })).status).toBe(401);
  });

  test("402 billing_error: PaymentRequiredError for an empty balance and for a spent key budget; nothing held", async () => {
    const empty = await gw.newWallet(0);
    const e = await rejection(anthropic(empty.key).messages.create({ model: "claude/claude-sonnet-4-5", max_tokens: 100, messages }));
    expect(e).toBeInstanceOf(PaymentRequiredError);
    expect(e.status).toBe(402);
    // No payment settings here: the message says how credit comes (no /v1/topup to point at).
    expect(e.error.error).toEqual({
      type: "billing_error",
      message: "Balance cannot cover the estimated cost of this request; this gateway takes no payments: ask its operator for credit",
    });

    const budgeted = await gw.newWallet(1, { budget_usdc: 1 });
    const b = await rejection(anthropic(budgeted.key).messages.create({ model: "standin/echo", max_tokens: 100, messages }));
    expect(b).toBeInstanceOf(PaymentRequiredError);
    expect(b.type).toBe("billing_error");
    expect(await gw.ledgerState(budgeted.wallet)).toEqual({ balance: START, locked: 0 });
  });

  test("429 rate_limit_error: the wallet's rate limit (Retry-After kept) and the provider's; RateLimitError", async () => {
    const limited = await startGateway({ RATE_LIMIT_REQUESTS: "1" });
    try {
      const { key } = await limited.newWallet(1);
      const client = anthropic(key, limited);
      await client.messages.create({ model: "standin/echo", max_tokens: 10, messages });
      const e = await rejection(client.messages.create({ model: "standin/echo", max_tokens: 10, messages }));
      expect(e).toBeInstanceOf(RateLimitError);
      expect(e.type).toBe("rate_limit_error");
      expect(Number(e.headers.get("retry-after"))).toBeGreaterThan(0);
      for (const h of ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"]) expect(e.headers.has(h)).toBe(true);
      await limited.services.chat.idle();

      // count_tokens counts against the same limit: free of charge, it must not be free of limits either.
      const other = await limited.newWallet(0);
      const counter = anthropic(other.key, limited);
      expect((await counter.messages.countTokens({ model: "standin/echo", messages })).input_tokens).toBeGreaterThan(0);
      const count = await rejection(counter.messages.countTokens({ model: "standin/echo", messages }));
      expect(count).toBeInstanceOf(RateLimitError);
      expect(count.error).toEqual({
        type: "error",
        error: { type: "rate_limit_error", message: "Rate limit of 1 requests per 60 s exceeded" },
      });
      expect(Number(count.headers.get("retry-after"))).toBeGreaterThan(0);
      const afterCount = await rejection(counter.messages.create({ model: "standin/echo", max_tokens: 10, messages }));
      expect(afterCount).toBeInstanceOf(RateLimitError);
    } finally {
      await limited.close();
    }
    const { wallet, key } = await gw.newWallet(1);
    const upstream = await rejection(anthropic(key).messages.create({ model: "claude/rate-limited", max_tokens: 10, messages }));
    expect(upstream).toBeInstanceOf(RateLimitError);
    expect(upstream.error.error).toEqual({ type: "rate_limit_error", message: "The model provider rejected the request" });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START, locked: 0 });
    expect(await pgEvents(wallet)).toEqual(["release"]);
  }, 60_000);
});

describe("provider refusals: the provider's status kept, its class raised, its detail not passed on", () => {
  for (const [model, status] of [
    ["claude/invalid", 400],
    ["standin/fail-400", 400],
    ["claude/rate-limited", 429],
    ["standin/fail-429", 429],
  ] as const) {
    test(`${model}: ${status}, JSON and stream; the hold released`, async () => {
      const { wallet, key } = await gw.newWallet(1);
      const client = anthropic(key);
      const errors = [
        await rejection(client.messages.create({ model, max_tokens: 10, messages })),
        await rejection(client.messages.stream({ model, max_tokens: 10, messages }).finalMessage()),
      ];
      for (const e of errors) {
        expect(e).toBeInstanceOf(status === 400 ? BadRequestError : RateLimitError);
        expect(e.status).toBe(status);
        expect(e.error).toEqual({
          type: "error",
          error: {
            type: status === 400 ? "invalid_request_error" : "rate_limit_error",
            message: "The model provider rejected the request",
          },
        });
      }
      expect(await gw.ledgerState(wallet)).toEqual({ balance: START, locked: 0 });
      expect(await pgEvents(wallet)).toEqual(["release", "release"]);
    });
  }
});

describe("provider failures: the hold released", () => {
  test("a provider that fails before answering: 502 api_error (InternalServerError), JSON and stream; released", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const client = anthropic(key);
    for (const model of ["claude/overloaded", "standin/fail-500"]) {
      const e = await rejection(client.messages.create({ model, max_tokens: 10, messages }));
      expect(e).toBeInstanceOf(InternalServerError);
      expect(e.status).toBe(502);
      expect(e.error.error).toEqual({ type: "api_error", message: `The model provider "${model.split("/")[0]}" failed to answer` });
      expect(await rejection(client.messages.stream({ model, max_tokens: 10, messages }).finalMessage())).toBeInstanceOf(
        InternalServerError,
      );
    }
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START, locked: 0 });
    expect(await pgEvents(wallet)).toEqual(["release", "release", "release", "release"]);
  });

  for (const model of ["claude/stream-overloaded", "standin/stream-error", "standin/stream-break"]) {
    test(`${model}: a failure mid-stream → the text before it, then an error event (fixed message); released`, async () => {
      const { wallet, key } = await gw.newWallet(1);
      const stream = anthropic(key).messages.stream({ model, max_tokens: 100, messages });
      let text = "";
      stream.on("text", (t) => (text += t));
      const e = await rejection(stream.finalMessage());
      expect(e).toBeInstanceOf(APIError);
      expect(e.status).toBeUndefined();
      expect(e.type).toBe("api_error");
      expect(e.error.error.message).toBe("The model provider failed during the stream");
      expect(text.length).toBeGreaterThan(0);
      if (model.startsWith("claude/")) expect(text).toBe(REPLY.slice(0, 2).join(""));
      expect(await gw.ledgerState(wallet)).toEqual({ balance: START, locked: 0 });
      expect(await pgEvents(wallet)).toEqual(["release"]);
    });
  }
});

describe("a client leaving mid-stream", () => {
  for (const [model, type] of [
    ["claude/hang", "Anthropic-type, native"],
    ["standin/hang", "OpenAI-type, translated"],
  ] as const) {
    test(`${model} (${type}): billed exactly as the same disconnect on /v1/chat/completions`, async () => {
      const messages = [{ role: "user", content: "hi" }];
      const viaChat = await gw.newWallet(1);
      await leaveStreamAfter(
        gw,
        "/v1/chat/completions",
        viaChat.key,
        { model, messages, max_tokens: 500, stream: true },
        3,
        /"content":"[^"]+"/g,
      );
      const viaMessages = await gw.newWallet(1);
      await leaveStreamAfter(gw, "/v1/messages", viaMessages.key, { model, messages, max_tokens: 500, stream: true }, 3, /"text_delta"/g);
      const chat = await gw.ledgerState(viaChat.wallet);
      expect(chat.locked).toBe(0);
      expect(chat.balance).toBeLessThan(START);
      expect(await gw.ledgerState(viaMessages.wallet)).toEqual(chat);
      expect(await pgEvents(viaMessages.wallet)).toEqual(["charge"]);
    });
  }
});
