/**
 * POST /v1/embeddings (issue 35.3) through the openai SDK's embeddings.create (which asks for base64 and decodes
 * it) and as raw HTTP: catalog models of kind "embedding", held from the inputs' bound, charged the provider's
 * usage.prompt_tokens × the prompt price exactly, the answer the provider's plus usage.charge_usdc; the wrong
 * endpoint for a kind, a key's model list, failover and bad input on the same path as chat.
 */
import { describe, expect, test } from "bun:test";
import { BadRequestError, PermissionDeniedError } from "openai";
import { embeddingsBound } from "../src/tariff/index.ts";
import { sharedGateway } from "./helpers/gateway.ts";
import { embeddingTokens, standinEmbedding } from "./helpers/openaiStandin.ts";

const gw = sharedGateway();

const START = 1_000_000;
const INPUTS = ["The food was delicious and the waiter was kind.", "Zürich in the rain"];
/** The test catalog's embedding price: 0.1 USD per 1M prompt tokens, i.e. 0.1 µUSDC a token, rounded up once. */
const chargeOf = (tokens: number) => Math.ceil(tokens / 10);

/** What `p` rejects with (a test fails when it resolves). */
async function rejection(p: Promise<unknown>): Promise<any> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  throw new Error("expected a rejection");
}

describe("embeddings", () => {
  test("the SDK's embeddings.create (base64 on the wire, decoded by the SDK): the provider's vectors, charged its usage exactly", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const from = gw.standin.requests.length;
    const { data: res, response } = await gw.openai(key).embeddings.create({ model: "standin/embed", input: INPUTS }).withResponse();
    expect(gw.standin.requests.slice(from)).toEqual([{ model: "embed", input: INPUTS, encoding_format: "base64" }]);
    expect(res.model).toBe("standin/embed");
    expect(res.data.map((d) => d.embedding)).toEqual(INPUTS.map((s) => standinEmbedding(s)));
    const tokens = embeddingTokens(INPUTS);
    expect(res.usage).toEqual({ prompt_tokens: tokens, total_tokens: tokens, charge_usdc: chargeOf(tokens) } as never);
    expect(response.headers.get("x-served-model")).toBe("standin/embed");
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - chargeOf(tokens), locked: 0 });
    await gw.services.chat.idle();
    await gw.services.flusher.drain();
    const [row] = await gw.services.sql<{ model: string; amount_usdc: number; prompt_tokens: number; completion_tokens: number }[]>`
      SELECT model, amount_usdc, prompt_tokens, completion_tokens FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge'`;
    expect({ ...row, amount_usdc: Number(row!.amount_usdc) }).toEqual({
      model: "standin/embed",
      amount_usdc: chargeOf(tokens),
      prompt_tokens: tokens,
      completion_tokens: 0,
    });
  });

  test("float and base64 as asked, one string or a list, dimensions passed on", async () => {
    const { key } = await gw.newWallet(1);
    const floats = await gw.openai(key).embeddings.create({ model: "standin/embed", input: "hi", encoding_format: "float", dimensions: 3 });
    expect(floats.data).toEqual([{ object: "embedding", index: 0, embedding: standinEmbedding("hi", 3) }]);
    const raw = await gw.call(
      "POST",
      "/v1/embeddings",
      { model: "standin/embed", input: INPUTS, encoding_format: "base64" },
      { authorization: `Bearer ${key}` },
    );
    expect(raw.status).toBe(200);
    const decoded = raw.body.data.map((d: { embedding: string }) => [
      ...new Float32Array(Buffer.from(d.embedding, "base64").buffer.slice(0)),
    ]);
    expect(decoded).toEqual(INPUTS.map((s) => standinEmbedding(s)));
    expect(raw.body.usage.charge_usdc).toBe(chargeOf(embeddingTokens(INPUTS)));
  });

  test("GET /v1/models lists embedding models with their kind", async () => {
    const data = (await gw.call("GET", "/v1/models")).body.data as { id: string; kind: string }[];
    expect(data.find((m) => m.id === "standin/embed")?.kind).toBe("embedding");
    expect(data.find((m) => m.id === "standin/echo")?.kind).toBe("chat");
  });

  test("a provider without usage: charged the counted tokens, which the answer reports", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const res = await gw.openai(key).embeddings.create({ model: "standin/embed-no-usage", input: INPUTS });
    const usage = res.usage as unknown as { prompt_tokens: number; total_tokens: number; charge_usdc: number };
    expect(usage.prompt_tokens).toBeGreaterThan(0);
    expect(usage.prompt_tokens).toBeLessThanOrEqual(
      embeddingsBound(gw.services.config.catalog.models.get("standin/embed")!, INPUTS).promptTokens,
    );
    expect(usage.charge_usdc).toBe(chargeOf(usage.prompt_tokens));
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - usage.charge_usdc, locked: 0 });
  });

  test("failover: an embedding model's fallbacks serve when its provider fails", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const { data: res, response } = await gw
      .openai(key)
      .embeddings.create({ model: "standin/embed-failover", input: INPUTS })
      .withResponse();
    expect(res.model).toBe("standin/embed-failover");
    expect(response.headers.get("x-served-model")).toBe("standin/embed");
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - chargeOf(embeddingTokens(INPUTS)), locked: 0 });
  });
});

describe("embeddings refused", () => {
  test("402 INSUFFICIENT_BALANCE without credit for the inputs' bound, nothing forwarded", async () => {
    const { wallet, key } = await gw.newWallet(0);
    const from = gw.standin.requests.length;
    const raw = await gw.call("POST", "/v1/embeddings", { model: "standin/embed", input: INPUTS }, { authorization: `Bearer ${key}` });
    const bound = embeddingsBound(gw.services.config.catalog.models.get("standin/embed")!, INPUTS);
    expect(bound.promptTokens).toBe(INPUTS.reduce((n, s) => n + Buffer.byteLength(s) + 8, 0));
    expect(raw.status).toBe(402);
    expect(raw.body).toMatchObject({ error: "INSUFFICIENT_BALANCE", available_usdc: 0, required_usdc: bound.micro });
    expect(gw.standin.requests.length).toBe(from);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 0, locked: 0 });
  });

  test("the wrong endpoint for a model's kind is 400 naming the right one", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const client = gw.openai(key);
    const onChat = await rejection(client.chat.completions.create({ model: "standin/embed", messages: [{ role: "user", content: "hi" }] }));
    expect(onChat).toBeInstanceOf(BadRequestError);
    const auth = { authorization: `Bearer ${key}` };
    const chat = await gw.call(
      "POST",
      "/v1/chat/completions",
      { model: "standin/embed", messages: [{ role: "user", content: "hi" }] },
      auth,
    );
    expect(chat.body).toEqual({
      error: "VALIDATION_ERROR",
      message: 'Model "standin/embed" is an embedding model: call it on POST /v1/embeddings',
    });
    expect(await rejection(client.embeddings.create({ model: "standin/echo", input: "hi" }))).toBeInstanceOf(BadRequestError);
    const embeddings = await gw.call("POST", "/v1/embeddings", { model: "standin/echo", input: "hi" }, auth);
    expect(embeddings.body).toEqual({
      error: "VALIDATION_ERROR",
      message: 'Model "standin/echo" is a chat model: call it on POST /v1/chat/completions',
    });
    const onResponses = await rejection(client.responses.create({ model: "standin/embed", input: "hi" }));
    expect(onResponses.status).toBe(400);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START, locked: 0 });
  });

  test("a key's model list applies: 403 MODEL_NOT_ALLOWED", async () => {
    const { key } = await gw.newWallet(1, { models: ["standin/echo"] });
    expect(await rejection(gw.openai(key).embeddings.create({ model: "standin/embed", input: "hi" }))).toBeInstanceOf(
      PermissionDeniedError,
    );
  });

  test("bad input is 400 VALIDATION_ERROR naming the field; the provider's 400 is passed back; nothing charged", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const auth = { authorization: `Bearer ${key}` };
    for (const [body, named] of [
      [{ model: "standin/embed" }, "input"],
      [{ model: "standin/embed", input: [] }, "input"],
      [{ model: "standin/embed", input: [1, 2] }, "input[0]"],
      [{ model: "standin/embed", input: [""] }, "input[0]"],
      [{ model: "standin/embed", input: "hi", encoding_format: "hex" }, "encoding_format"],
      [{ model: "standin/embed", input: "hi", dimensions: 0 }, "dimensions"],
      [{ input: "hi" }, "model"],
    ] as const) {
      const res = await gw.call("POST", "/v1/embeddings", body, auth);
      expect(res.status).toBe(400);
      expect(res.body.error).toBe("VALIDATION_ERROR");
      expect(res.body.message).toStartWith(`${named}:`);
    }
    const upstream = await gw.call("POST", "/v1/embeddings", { model: "standin/embed-fail-400", input: "hi" }, auth);
    expect(upstream).toMatchObject({ status: 400, body: { error: "UPSTREAM_CLIENT_ERROR" } });
    expect((await gw.call("POST", "/v1/embeddings", { model: "standin/embed", input: "hi" })).status).toBe(401);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START, locked: 0 });
  });
});
