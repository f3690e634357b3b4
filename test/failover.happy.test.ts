/**
 * Failover (issue 35.4): a catalog model's `fallbacks` are tried in order when its provider fails before the
 * answer starts (connection refused, 429, 5xx). One answer naming the model asked for, X-Served-Model naming the
 * one that served, charged once at the serving model's prices from its usage, under one hold that covers the
 * dearest model of the chain; a 4xx other than 429 is passed back untried; every model failing is today's error
 * with nothing charged. Through the openai SDK, JSON and streams.
 */
import { describe, expect, test } from "bun:test";
import { APIError, BadRequestError, InternalServerError, PermissionDeniedError } from "openai";
import { boundedRequest } from "../src/tariff/index.ts";
import { expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { usageFor } from "./helpers/openaiStandin.ts";

const gw = sharedGateway();

const START = 1_000_000;
const messages = [{ role: "user" as const, content: "hi" }];
const usage = usageFor(messages.length);
const charge = expectedCharge(usage.prompt_tokens, usage.completion_tokens);
/** The same usage at echo-dear's prices (twice the catalog's). */
const dearCharge = Math.ceil((usage.prompt_tokens * 5_000_000 + usage.completion_tokens * 20_000_000) / 1_000_000);

/** What `p` rejects with (a test fails when it resolves). */
async function rejection(p: Promise<unknown>): Promise<any> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  throw new Error("expected a rejection");
}

/** The models the stand-in was asked for since `from` (its upstream names, in order). */
const askedSince = (from: number) => gw.standin.requests.slice(from).map((r) => r.model);

/** The charges Postgres recorded for a wallet: model and amount. */
async function charges(wallet: string) {
  await gw.services.chat.idle();
  await gw.services.flusher.drain();
  return (
    await gw.services.sql<{ model: string; amount_usdc: number }[]>`
      SELECT model, amount_usdc FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge' ORDER BY occurred_at`
  ).map((r) => [r.model, Number(r.amount_usdc)]);
}

describe("failover to a catalog model's fallbacks", () => {
  test("a 5xx: served by the next model, answer named as asked, X-Served-Model, charged once at the server's prices", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const from = gw.standin.requests.length;
    const { data, response } = await gw.openai(key).chat.completions.create({ model: "standin/failover-500", messages }).withResponse();
    expect(data.model).toBe("standin/failover-500");
    expect(data.usage).toMatchObject({ ...usage, charge_usdc: dearCharge });
    expect(response.headers.get("x-served-model")).toBe("standin/echo-dear");
    expect(askedSince(from)).toEqual(["fail-500", "echo"]);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - dearCharge, locked: 0 });
    expect(await charges(wallet)).toEqual([["standin/echo-dear", dearCharge]]);
  });

  test("streams fail over before the first byte: chunks named as asked, charged at the serving model's prices", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const { data: stream, response } = await gw
      .openai(key)
      .chat.completions.create({ model: "standin/failover-500", messages, stream: true, stream_options: { include_usage: true } })
      .withResponse();
    expect(response.headers.get("x-served-model")).toBe("standin/echo-dear");
    let text = "";
    let reported;
    for await (const chunk of stream) {
      expect(chunk.model).toBe("standin/failover-500");
      text += chunk.choices[0]?.delta.content ?? "";
      if (chunk.usage) reported = chunk.usage;
    }
    expect(text).toBe("Hello from the stand-in");
    expect(reported).toMatchObject(usage);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - dearCharge, locked: 0 });
  });

  test("a refused connection and the provider's own 429 fail over too (JSON and stream)", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const client = gw.openai(key);
    for (const model of ["dead/failover", "standin/failover-429"]) {
      const { data, response } = await client.chat.completions.create({ model, messages }).withResponse();
      expect(data.model).toBe(model);
      expect(response.headers.get("x-served-model")).toBe("standin/echo");
      const streamed = await client.chat.completions.create({ model, messages, stream: true }).withResponse();
      expect(streamed.response.headers.get("x-served-model")).toBe("standin/echo");
      for await (const _ of streamed.data);
    }
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - 4 * charge, locked: 0 });
  });

  test("the hold covers the dearest model of the chain: a wallet that covers only the first is refused 402", async () => {
    const catalog = gw.services.config.catalog;
    const body = { model: "standin/failover-500", messages };
    const held = ["standin/failover-500", "standin/echo-dear", "standin/echo"].map(
      (id) => boundedRequest(catalog.models.get(id)!, body, false).bound.micro,
    );
    expect(held[1]).toBeGreaterThan(held[0]!);
    const { wallet, key } = await gw.newWallet(0);
    await gw.grant(wallet, held[0]!);
    const raw = await gw.call("POST", "/v1/chat/completions", body, { authorization: `Bearer ${key}` });
    expect(raw.status).toBe(402);
    expect(raw.body).toMatchObject({ error: "INSUFFICIENT_BALANCE", available_usdc: held[0], required_usdc: Math.max(...held) });
    // With the dearest covered, it is served by echo-dear and charged its exact usage.
    await gw.grant(wallet, held[1]! - held[0]!);
    expect((await gw.call("POST", "/v1/chat/completions", body, { authorization: `Bearer ${key}` })).status).toBe(200);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: held[1]! - dearCharge, locked: 0 });
  });
});

describe("what does not fail over", () => {
  test("a 4xx other than 429 is passed back, the fallbacks untried, nothing charged", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const from = gw.standin.requests.length;
    const e = await rejection(gw.openai(key).chat.completions.create({ model: "standin/failover-400", messages }));
    expect(e).toBeInstanceOf(BadRequestError);
    expect(e.error).toBe("UPSTREAM_CLIENT_ERROR");
    expect(askedSince(from)).toEqual(["fail-400"]);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START, locked: 0 });
  });

  test("every model failing: the asked model's error (502), each tried once, nothing charged (JSON and stream)", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const client = gw.openai(key);
    const from = gw.standin.requests.length;
    const e = await rejection(client.chat.completions.create({ model: "standin/failover-none", messages }));
    expect(e).toBeInstanceOf(InternalServerError);
    expect(e.status).toBe(502);
    expect(e.error).toBe("UPSTREAM_ERROR");
    const s = await rejection(client.chat.completions.create({ model: "standin/failover-none", messages, stream: true }));
    expect(s).toBeInstanceOf(APIError);
    expect(s.status).toBe(502);
    // dead/echo refuses the connection: the stand-in sees fail-500 and fail-429 of each request.
    expect(askedSince(from)).toEqual(["fail-500", "fail-429", "fail-500", "fail-429"]);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START, locked: 0 });
    expect(await charges(wallet)).toEqual([]);
  });

  test("a key's allow-list applies to the chain: fallbacks it may not call are skipped", async () => {
    const { wallet, key } = await gw.newWallet(1, { models: ["standin/failover-500", "standin/echo"] });
    const client = gw.openai(key);
    const { response } = await client.chat.completions.create({ model: "standin/failover-500", messages }).withResponse();
    expect(response.headers.get("x-served-model")).toBe("standin/echo");
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - charge, locked: 0 });
    expect(await rejection(client.chat.completions.create({ model: "standin/echo-dear", messages }))).toBeInstanceOf(PermissionDeniedError);
  });
});
