/**
 * A catalog model's `aliases` (an agent's own default ids) answer on every door: chat completions, the Responses
 * API and the Messages API, JSON and stream, count_tokens and GET /v1/models/{id}. The answer names the alias the
 * client asked for; the charge is the model's, and Postgres records the model's id. GET /v1/models lists ids, each
 * with its aliases as a field. (Test catalog: "claude-haiku-4-5" is claude/claude-sonnet-4-5's alias, "gpt-5-codex"
 * standin/tool-caller's.)
 */
import Anthropic from "@anthropic-ai/sdk";
import { describe, expect, test } from "bun:test";
import { inputTokensFor, planFor, REPLY } from "./helpers/anthropicStandin.ts";
import { BASE, expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { REPLY_WORDS } from "./helpers/openaiStandin.ts";

const gw = sharedGateway();
const START = 10_000_000;
const SONNET = "claude/claude-sonnet-4-5";
const CALLER = "standin/tool-caller";

/** The charge of the OpenAI stand-in's answer to `n` chat messages. */
const standinCharge = (n: number) => expectedCharge(10 * n + 1, REPLY_WORDS.length);

/** The charge of the Anthropic stand-in's answer to the last request it received, and that request. */
function claudeBill() {
  const request = gw.anthropic.requests.at(-1)!;
  return { request, charge: expectedCharge(inputTokensFor(request), planFor(request).outputTokens) };
}

async function pgModels(wallet: string): Promise<string[]> {
  await gw.services.flusher.drain();
  const rows = await gw.services.sql<{ model: string }[]>`SELECT model FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge'`;
  return rows.map((r) => r.model);
}

const anthropic = (apiKey: string) => new Anthropic({ baseURL: BASE, apiKey, fetch: gw.fetch, maxRetries: 0 });

describe("GET /v1/models", () => {
  test("lists ids only, each model with its aliases as a field; an alias's page is its model's", async () => {
    const list = await gw.call("GET", "/v1/models");
    const ids = list.body.data.map((m: { id: string }) => m.id);
    expect(ids).not.toContain("gpt-5-codex");
    expect(ids).not.toContain("claude-haiku-4-5");
    expect(list.body.data.find((m: { id: string }) => m.id === CALLER).aliases).toEqual(["gpt-5-codex", "gpt-6.2-sol"]);
    expect(list.body.data.find((m: { id: string }) => m.id === SONNET).aliases).toEqual(["claude-haiku-4-5"]);
    expect(list.body.data.find((m: { id: string }) => m.id === "standin/echo").aliases).toEqual([]);
    const page = await gw.call("GET", "/v1/models/gpt-5-codex");
    expect(page).toMatchObject({ status: 200, body: { id: CALLER, aliases: ["gpt-5-codex", "gpt-6.2-sol"] } });
  });
});

describe("an alias on every door: answered as the alias, billed as its model", () => {
  test("chat completions, JSON and stream (OpenAI SDK)", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const openai = gw.openai(key);
    const answer = await openai.chat.completions.create({ model: "gpt-5-codex", messages: [{ role: "user", content: "Hi" }] });
    expect(answer.model).toBe("gpt-5-codex");
    expect(answer.choices[0]!.message.content).toBe(REPLY_WORDS.join(""));
    expect(gw.standin.requests.at(-1)!.model).toBe("tool-caller");
    const stream = await openai.chat.completions.create({
      model: "gpt-5-codex",
      messages: [{ role: "user", content: "Hi" }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const models = new Set<string>();
    for await (const chunk of stream) models.add(chunk.model);
    expect([...models]).toEqual(["gpt-5-codex"]);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - 2 * standinCharge(1), locked: 0 });
    expect(await pgModels(wallet)).toEqual([CALLER, CALLER]);
  });

  test("the Responses API, JSON and stream (OpenAI SDK), to an Anthropic-type model", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const openai = gw.openai(key);
    const response = await openai.responses.create({ model: "claude-haiku-4-5", input: "Hi", store: false });
    let bill = claudeBill();
    expect(response.model).toBe("claude-haiku-4-5");
    expect(response.output_text).toBe(REPLY.join(""));
    expect(bill.request.model).toBe("claude-sonnet-4-5");
    let charged = bill.charge;
    const stream = await openai.responses.create({ model: "claude-haiku-4-5", input: "Hi", store: false, stream: true });
    let last: { type: string; response?: { model: string } } | undefined;
    for await (const event of stream) last = event as typeof last;
    expect(last).toMatchObject({ type: "response.completed", response: { model: "claude-haiku-4-5" } });
    bill = claudeBill();
    charged += bill.charge;
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - charged, locked: 0 });
    expect(await pgModels(wallet)).toEqual([SONNET, SONNET]);
  });

  test("the Messages API (Anthropic SDK): native to an Anthropic-type model, translated to an OpenAI-type one; count_tokens", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const client = anthropic(key);
    const native = await client.messages.create({
      model: "claude-haiku-4-5",
      max_tokens: 100,
      messages: [{ role: "user", content: "Hi" }],
    });
    const bill = claudeBill();
    expect(native.model).toBe("claude-haiku-4-5");
    expect(bill.request.model).toBe("claude-sonnet-4-5");
    const translated = client.messages.stream({ model: "gpt-5-codex", max_tokens: 100, messages: [{ role: "user", content: "Hi" }] });
    const message = await translated.finalMessage();
    expect(message.model).toBe("gpt-5-codex");
    expect(message.content).toEqual([{ type: "text", text: REPLY_WORDS.join("") } as never]);
    const counted = await client.messages.countTokens({ model: "gpt-5-codex", messages: [{ role: "user", content: "Hi" }] });
    expect(counted.input_tokens).toBeGreaterThan(0);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - bill.charge - standinCharge(1), locked: 0 });
    expect((await pgModels(wallet)).sort()).toEqual([SONNET, CALLER].sort());
  });

  test("a key limited to some models: an alias of one it may call answers, of one it may not is 403; its list shows each model once", async () => {
    const { wallet, key } = await gw.newWallet(10, { models: [CALLER] });
    const auth = { authorization: `Bearer ${key}` };
    const list = await gw.call("GET", "/v1/models", undefined, auth);
    expect(list.body.data.map((m: { id: string }) => m.id)).toEqual([CALLER]);
    const ok = await gw.call("POST", "/v1/chat/completions", { model: "gpt-5-codex", messages: [{ role: "user", content: "Hi" }] }, auth);
    expect(ok).toMatchObject({ status: 200, body: { model: "gpt-5-codex" } });
    const refused = await gw.call(
      "POST",
      "/v1/chat/completions",
      { model: "claude-haiku-4-5", messages: [{ role: "user", content: "Hi" }] },
      auth,
    );
    expect(refused).toMatchObject({ status: 403, body: { error: "MODEL_NOT_ALLOWED" } });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - standinCharge(1), locked: 0 });
  });

  test("a name that is no model's id nor alias is still UNKNOWN_MODEL, and changes nothing", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const res = await gw.call(
      "POST",
      "/v1/chat/completions",
      { model: "gpt-5", messages: [{ role: "user", content: "Hi" }] },
      {
        authorization: `Bearer ${key}`,
      },
    );
    expect(res).toMatchObject({
      status: 400,
      body: { error: "UNKNOWN_MODEL", message: 'Unknown model "gpt-5"; GET /v1/models lists the models served' },
    });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START, locked: 0 });
  });
});
