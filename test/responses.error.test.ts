/**
 * POST /v1/responses when things go wrong: each client's error class for 400, 401, 402 and 429 (OpenAI's error
 * shape, the spec's codes), stored conversations that are not there (unknown, another wallet's, store:false),
 * provider failures before and during a stream (hold released, balance untouched) and a client leaving mid-stream
 * (billed exactly as the same disconnect on /v1/chat/completions).
 */
import type { Redis } from "ioredis";
import { describe, expect, test } from "bun:test";
import { createOpenAI } from "@ai-sdk/openai";
import { ChatOpenAI } from "@langchain/openai";
import { APICallError, generateText } from "ai";
import OpenAI from "openai";
import { leaveStreamAfter } from "./helpers/disconnect.ts";
import { ConversationStore } from "../src/modules/responses/conversations.ts";
import { StoredItemMissing } from "../src/modules/responses/errors.ts";
import { newId } from "../src/providers/responses/wire.ts";
import { BASE, sharedGateway } from "./helpers/gateway.ts";

// A small rate limit to reach 429 quickly (per wallet: the other tests use their own wallets).
const gw = sharedGateway({ RATE_LIMIT_REQUESTS: "5", RATE_LIMIT_WINDOW_S: "60", RESPONSES_STORE_TTL_S: "120" });

const ECHO = "standin/echo";

async function expectUntouched(wallet: string, balance = 1_000_000) {
  expect(await gw.ledgerState(wallet)).toEqual({ balance, locked: 0 });
}

async function post(key: string, body: unknown) {
  return gw.call("POST", "/v1/responses", body, { authorization: `Bearer ${key}` });
}

const aiProvider = (key: string) => createOpenAI({ baseURL: `${BASE}/v1`, apiKey: key, fetch: gw.fetch });
const langchain = (key: string, model: string) =>
  new ChatOpenAI({ model, apiKey: key, useResponsesApi: true, maxRetries: 0, configuration: { baseURL: `${BASE}/v1`, fetch: gw.fetch } });

/** The error a call rejects with (the test fails if it resolves). */
async function rejection(p: Promise<unknown>): Promise<any> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  throw new Error("expected the call to fail");
}

describe("each client's error class, OpenAI's error shape", () => {
  test("400 unknown model: BadRequestError / APICallError 400 / LangChain's BadRequestError, with the message", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const e = await rejection(gw.openai(key).responses.create({ model: "nope/nothing", input: "hi" }));
    expect(e).toBeInstanceOf(OpenAI.BadRequestError);
    expect(e.code).toBe("UNKNOWN_MODEL");
    expect(e.type).toBe("invalid_request_error");
    expect(e.message).toContain("nope/nothing");
    const ai = await rejection(
      generateText({
        model: createOpenAI({ baseURL: `${BASE}/v1`, apiKey: key, fetch: gw.fetch })("nope/nothing"),
        prompt: "hi",
        maxRetries: 0,
      }),
    );
    expect(APICallError.isInstance(ai)).toBe(true);
    expect(ai.statusCode).toBe(400);
    expect(ai.message).toContain("nope/nothing");
    const lc = await rejection(
      new ChatOpenAI({
        model: "nope/nothing",
        apiKey: key,
        useResponsesApi: true,
        maxRetries: 0,
        configuration: { baseURL: `${BASE}/v1`, fetch: gw.fetch },
      }).invoke("hi"),
    );
    expect(lc).toBeInstanceOf(OpenAI.BadRequestError);
    await expectUntouched(wallet);
  });

  test("401 bad key: AuthenticationError / APICallError 401", async () => {
    const e = await rejection(gw.openai("sk-not-a-key").responses.create({ model: ECHO, input: "hi" }));
    expect(e).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(e.code).toBe("UNAUTHORIZED");
    const ai = await rejection(
      generateText({
        model: createOpenAI({ baseURL: `${BASE}/v1`, apiKey: "sk-not-a-key", fetch: gw.fetch })(ECHO),
        prompt: "hi",
        maxRetries: 0,
      }),
    );
    expect(ai.statusCode).toBe(401);
    expect(ai.message).toBe("Missing or invalid credentials");
    const lc = await rejection(langchain("sk-not-a-key", ECHO).invoke("hi"));
    expect(lc).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(lc.status).toBe(401);
  });

  test("402 insufficient balance: APIError status 402 carrying the balance; no hold", async () => {
    const { wallet, key } = await gw.newWallet(0);
    await gw.grant(wallet, 100);
    const e = await rejection(gw.openai(key).responses.create({ model: ECHO, input: "hi" }));
    expect(e).toBeInstanceOf(OpenAI.APIError);
    expect(e.status).toBe(402);
    expect(e.code).toBe("INSUFFICIENT_BALANCE");
    expect(e.error).toMatchObject({ available_usdc: 100, topup: { endpoint: null } }); // no payment settings here: no /v1/topup
    const ai = await rejection(
      generateText({ model: createOpenAI({ baseURL: `${BASE}/v1`, apiKey: key, fetch: gw.fetch })(ECHO), prompt: "hi", maxRetries: 0 }),
    );
    expect(ai.statusCode).toBe(402);
    const lc = await rejection(langchain(key, "claude/claude-sonnet-4-5").invoke("hi"));
    expect(lc).toBeInstanceOf(OpenAI.APIError);
    expect(lc.status).toBe(402);
    expect(lc.code).toBe("INSUFFICIENT_BALANCE");
    await expectUntouched(wallet, 100);
  });

  test("429 RATE_LIMITED: RateLimitError with Retry-After; not charged", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const client = gw.openai(key);
    const statuses: (number | string)[] = [];
    let limited: any;
    const started = Date.now();
    for (let i = 0; i < 6; i++) {
      const e = await rejection(client.responses.create({ model: "standin/fail-400", input: "hi" }));
      statuses.push(e.status);
      if (e.status === 429) limited = e;
    }
    expect(statuses).toEqual([400, 400, 400, 400, 400, 429]);
    expect(limited).toBeInstanceOf(OpenAI.RateLimitError);
    expect(limited.code).toBe("RATE_LIMITED");
    expect(Number(limited.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    const ai = await rejection(generateText({ model: aiProvider(key)("claude/claude-sonnet-4-5"), prompt: "hi", maxRetries: 0 }));
    expect(APICallError.isInstance(ai)).toBe(true);
    expect(ai.statusCode).toBe(429);
    // The same window, read a moment later: its seconds left (rounded up) are the first answer's, or fewer by at
    // most the whole seconds (rounded up) that passed since the first 429's request started.
    const first = Number(limited.headers.get("retry-after"));
    const later = Number(ai.responseHeaders["retry-after"]);
    expect(later).toBeLessThanOrEqual(first);
    expect(later).toBeGreaterThanOrEqual(Math.max(1, first - Math.ceil((Date.now() - started) / 1000)));
    const lc = await rejection(langchain(key, "claude/claude-sonnet-4-5").invoke("hi"));
    expect(lc).toBeInstanceOf(OpenAI.RateLimitError);
    expect(lc.code).toBe("RATE_LIMITED");
    await expectUntouched(wallet);
  });

  for (const [model, status] of [
    ["standin/fail-400", 400],
    ["claude/invalid", 400],
    ["standin/fail-429", 429],
    ["claude/rate-limited", 429],
  ] as const) {
    test(`${model}: the provider's ${status} reaches each client as its class, fixed message; the hold released`, async () => {
      const { wallet, key } = await gw.newWallet(1);
      const e = await rejection(gw.openai(key).responses.create({ model, input: "hi" }));
      expect(e).toBeInstanceOf(status === 400 ? OpenAI.BadRequestError : OpenAI.RateLimitError);
      expect(e.status).toBe(status);
      expect(e.code).toBe("UPSTREAM_CLIENT_ERROR");
      expect(e.error.message).toBe("The model provider rejected the request");
      const ai = await rejection(generateText({ model: aiProvider(key)(model), prompt: "hi", maxRetries: 0 }));
      expect(APICallError.isInstance(ai)).toBe(true);
      expect(ai.statusCode).toBe(status);
      const lc = await rejection(langchain(key, model).invoke("hi"));
      expect(lc).toBeInstanceOf(status === 400 ? OpenAI.BadRequestError : OpenAI.RateLimitError);
      await expectUntouched(wallet);
    });
  }

  test("bad input: 400 VALIDATION_ERROR naming the field, in OpenAI's shape, before any hold", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const cases: [unknown, RegExp][] = [
      [{ model: ECHO, input: [{ type: "computer_call", id: "x" }] }, /^input\[0\]: item type "computer_call"/],
      [{ model: ECHO, input: "hi", max_output_tokens: 0 }, /^max_output_tokens/],
      [{ model: ECHO, input: [] }, /^input: at least one item/],
      [{ input: "hi" }, /^model/],
    ];
    for (const [body, message] of cases) {
      const res = await post(key, body);
      expect(res.status).toBe(400);
      expect(res.body).toEqual({
        error: { message: expect.stringMatching(message), type: "invalid_request_error", code: "VALIDATION_ERROR", param: null },
      });
    }
    const raw = await gw.handle(
      new Request(`${BASE}/v1/responses`, { method: "POST", headers: { authorization: `Bearer ${key}` }, body: "{not json" }),
    );
    expect(raw.status).toBe(400);
    expect(await raw.json()).toEqual({
      error: { message: "Body is not valid JSON", type: "invalid_request_error", code: "VALIDATION_ERROR", param: null },
    });
    await expectUntouched(wallet);
  });
});

describe("stored conversations that are not there", () => {
  test("unknown previous_response_id: 400 previous_response_not_found saying to resend; no hold", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const e = await rejection(gw.openai(key).responses.create({ model: ECHO, previous_response_id: "resp_nothing", input: "hi" }));
    expect(e).toBeInstanceOf(OpenAI.BadRequestError);
    expect(e.code).toBe("previous_response_not_found");
    expect(e.param).toBe("previous_response_id");
    expect(e.message).toContain("resend the whole conversation");
    await expectUntouched(wallet);
  });

  test("an unknown id made long ago is read once and refused at once; a fresh one is read again first", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const names = gw.services.ledger.names;
    const second = Math.floor(Date.now() / 1000);
    const stale = `resp_${(second - 60).toString(16)}${"0".repeat(40)}`;
    const fresh = newId("resp");
    const reads = new Map<string, number>();
    const keyOf = (id: string) => names.storedResponse(names.shardOf(wallet), wallet, id);
    const monitor = await (gw.services.redis as Redis).monitor();
    try {
      monitor.on("monitor", (_time: string, args: string[]) => {
        if (args[0]?.toUpperCase() === "GET") reads.set(args[1]!, (reads.get(args[1]!) ?? 0) + 1);
      });
      for (const id of [stale, fresh]) {
        const e = await rejection(gw.openai(key).responses.create({ model: ECHO, previous_response_id: id, input: "hi" }));
        expect(e.code).toBe("previous_response_not_found");
      }
      // MONITOR reports commands in the order Redis ran them: once this marker is seen, every earlier read was.
      const marker = `marker:${crypto.randomUUID()}`;
      const seen = new Promise<void>((resolve) => monitor.on("monitor", (_t: string, args: string[]) => args[1] === marker && resolve()));
      await gw.services.redis.get(marker);
      await seen;
      expect(reads.get(keyOf(stale))).toBe(1);
      expect(reads.get(keyOf(fresh))).toBeGreaterThan(1);
    } finally {
      monitor.disconnect();
    }
    await expectUntouched(wallet);
  });

  test("past the cap on waiting reads, a fresh id's miss is refused at once", async () => {
    const { wallet } = await gw.newWallet(1);
    const names = gw.services.ledger.names;
    const store = new ConversationStore(
      gw.services.scripts.client,
      names,
      { ttlS: 60, itemBytes: 1 << 20, conversationBytes: 1 << 22, walletBytes: 1 << 26, walletResponses: 10_000 },
      gw.services.ledger,
      1,
    );
    const keyOf = (id: string) => names.storedResponse(names.shardOf(wallet), wallet, id);
    // Made "next second": fresh for 3–4 s from now, so it keeps the one waiting place while the second id is read.
    const holder = `resp_${(Math.floor(Date.now() / 1000) + 1).toString(16)}${"1".repeat(40)}`;
    const refused = newId("resp");
    const reads = new Map<string, number>();
    const monitor = await (gw.services.redis as Redis).monitor();
    try {
      let holderReads!: () => void;
      const holding = new Promise<void>((resolve) => (holderReads = resolve));
      monitor.on("monitor", (_time: string, args: string[]) => {
        if (args[0]?.toUpperCase() !== "GET") return;
        reads.set(args[1]!, (reads.get(args[1]!) ?? 0) + 1);
        if (args[1] === keyOf(holder) && reads.get(args[1]!) === 2) holderReads();
      });
      const first = store.resolve(wallet, holder, []).catch((e) => e);
      await holding; // its second read: it is waiting
      const e = await store.resolve(wallet, refused, []).catch((e) => e);
      expect(e).toBeInstanceOf(StoredItemMissing);
      const marker = `marker:${crypto.randomUUID()}`;
      const seen = new Promise<void>((resolve) => monitor.on("monitor", (_t: string, args: string[]) => args[1] === marker && resolve()));
      await gw.services.redis.get(marker);
      await seen;
      expect(reads.get(keyOf(refused))).toBe(1);
      expect(await first).toBeInstanceOf(StoredItemMissing);
    } finally {
      monitor.disconnect();
    }
  });

  test("unknown item_reference: 404 item_not_found (NotFoundError)", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const e = await rejection(
      gw.openai(key).responses.create({
        model: ECHO,
        input: [
          { type: "item_reference", id: "msg_nothing" },
          { role: "user", content: "hi" },
        ],
      }),
    );
    expect(e).toBeInstanceOf(OpenAI.NotFoundError);
    expect(e.code).toBe("item_not_found");
    expect(e.param).toBe("input");
    await expectUntouched(wallet);
  });

  test("another wallet's response and items are not found, as if unknown", async () => {
    const owner = await gw.newWallet(1);
    const r1 = await gw.openai(owner.key).responses.create({ model: ECHO, input: "secret" });
    const other = await gw.newWallet(1);
    const byId = await rejection(
      gw.openai(other.key).responses.create({ model: ECHO, previous_response_id: r1.id, input: "what did they say?" }),
    );
    expect(byId.status).toBe(400);
    expect(byId.code).toBe("previous_response_not_found");
    const byItem = await rejection(
      gw.openai(other.key).responses.create({ model: ECHO, input: [{ type: "item_reference", id: r1.output[0]!.id! }] }),
    );
    expect(byItem.status).toBe(404);
    await expectUntouched(other.wallet);
  });

  test("store:false keeps nothing; a stored response expires after RESPONSES_STORE_TTL_S", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const client = gw.openai(key);
    const unstored = await client.responses.create({ model: ECHO, input: "hi", store: false });
    expect((unstored as unknown as { store: boolean }).store).toBe(false);
    const e = await rejection(client.responses.create({ model: ECHO, previous_response_id: unstored.id, input: "again" }));
    expect(e.code).toBe("previous_response_not_found");
    const stored = await client.responses.create({ model: ECHO, input: "hi" });
    const names = gw.services.ledger.names;
    // On the gateway's own connection, as a next turn here would read: after the write queued before the answer.
    const kept = names.storedResponse(names.shardOf(wallet), wallet, stored.id);
    const ttl = (await gw.services.scripts.client.send("TTL", [kept], kept)) as number;
    expect(ttl).toBeGreaterThan(100);
    expect(ttl).toBeLessThanOrEqual(120);
  });
});

describe("provider failures release the hold", () => {
  for (const model of ["standin/fail-500", "claude/overloaded"]) {
    test(`${model}, before the answer: 502 InternalServerError, JSON and stream; balance untouched`, async () => {
      const { wallet, key } = await gw.newWallet(1);
      const e = await rejection(gw.openai(key).responses.create({ model, input: "hi" }));
      expect(e).toBeInstanceOf(OpenAI.InternalServerError);
      expect(e.status).toBe(502);
      expect(e.code).toBe("UPSTREAM_ERROR");
      const s = await rejection(gw.openai(key).responses.create({ model, input: "hi", stream: true }));
      expect(s.status).toBe(502);
      await expectUntouched(wallet);
    });
  }

  test("mid-stream: response.failed with a fixed message, no upstream detail; released", async () => {
    const { wallet, key } = await gw.newWallet(1);
    for (const model of ["standin/stream-error", "standin/stream-break", "claude/stream-overloaded"]) {
      const final = await gw.openai(key).responses.stream({ model, input: "hi" }).finalResponse();
      expect(final.status).toBe("failed");
      expect(final.error).toEqual({ code: "server_error", message: "The model provider failed during the stream" });
      // The text before the failure did reach the client.
      expect(final.output_text.length).toBeGreaterThan(0);
    }
    await expectUntouched(wallet);
  });
});

describe("a client leaving mid-stream", () => {
  for (const model of ["standin/hang", "claude/hang"]) {
    test(`${model}: billed exactly as the same disconnect on /v1/chat/completions`, async () => {
      const viaChat = await gw.newWallet(1);
      await leaveStreamAfter(
        gw,
        "/v1/chat/completions",
        viaChat.key,
        { model, messages: [{ role: "user", content: "hi" }], max_tokens: 500, stream: true },
        3,
        /"content":"[^"]+"/g,
      );
      const viaResponses = await gw.newWallet(1);
      await leaveStreamAfter(
        gw,
        "/v1/responses",
        viaResponses.key,
        { model, input: "hi", max_output_tokens: 500, stream: true },
        3,
        /"response\.output_text\.delta"/g,
      );
      const chat = await gw.ledgerState(viaChat.wallet);
      expect(chat.locked).toBe(0);
      expect(chat.balance).toBeLessThan(1_000_000);
      expect(await gw.ledgerState(viaResponses.wallet)).toEqual(chat);
    });
  }
});
