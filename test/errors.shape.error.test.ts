/**
 * ERROR_SHAPE: the spec's `{error: CODE, message}` by default, OpenAI's `{error: {message, type, code, param}}` on the
 * OpenAI-compatible routes with ERROR_SHAPE=openai, as the official `openai` SDK sees each; other routes and in-stream
 * errors keep their own shape either way.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { toOpenaiShape } from "../src/errors.ts";
import { startGateway, type TestGateway } from "./helpers/gateway.ts";

let spec: TestGateway;
let oai: TestGateway;
beforeAll(async () => {
  spec = await startGateway();
  oai = await startGateway({ ERROR_SHAPE: "openai" });
}, 90_000);
afterAll(async () => {
  await spec?.close();
  await oai?.close();
});

const messages = [{ role: "user" as const, content: "hi" }];

async function rejection(p: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  try {
    await p;
  } catch (e) {
    return e as InstanceType<typeof OpenAI.APIError>;
  }
  throw new Error("expected a rejection");
}

describe("ERROR_SHAPE=spec (default): the spec's body, which the SDK shows as the bare code", () => {
  test("UNKNOWN_MODEL: BadRequestError whose message is the quoted code; the body is the spec's", async () => {
    const { key, wallet } = await spec.newWallet(1);
    const e = await rejection(spec.openai(key).chat.completions.create({ model: "nope/nothing", messages }));
    expect(e).toBeInstanceOf(OpenAI.BadRequestError);
    expect(e.status).toBe(400);
    expect(e.message).toBe('400 "UNKNOWN_MODEL"');
    expect(e.code).toBeUndefined();
    const raw = await spec.call("POST", "/v1/chat/completions", { model: "nope/nothing", messages }, { authorization: `Bearer ${key}` });
    expect(raw.body).toEqual({ error: "UNKNOWN_MODEL", message: 'Unknown model "nope/nothing"; GET /v1/models lists the models served' });
    expect(await spec.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
  });
});

describe("ERROR_SHAPE=openai on the OpenAI-compatible routes", () => {
  test("UNKNOWN_MODEL: BadRequestError with the gateway's message, code and type; nothing held", async () => {
    const { key, wallet } = await oai.newWallet(1);
    const e = await rejection(oai.openai(key).chat.completions.create({ model: "nope/nothing", messages }));
    expect(e).toBeInstanceOf(OpenAI.BadRequestError);
    expect(e.message).toBe('400 Unknown model "nope/nothing"; GET /v1/models lists the models served');
    expect(e.code).toBe("UNKNOWN_MODEL");
    expect(e.type).toBe("invalid_request_error");
    expect(e.param).toBeNull();
    expect(await oai.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
  });

  test("402 INSUFFICIENT_BALANCE: the amounts and the top-up pointer inside error, beside the code", async () => {
    const { key, wallet } = await oai.newWallet(0);
    await oai.grant(wallet, 100);
    const e = await rejection(oai.openai(key).chat.completions.create({ model: "standin/echo", messages }));
    expect(e).toBeInstanceOf(OpenAI.APIError);
    expect(e.status).toBe(402);
    expect(e.code).toBe("INSUFFICIENT_BALANCE");
    // This gateway has no payment settings: the pointer says how credit comes, not /v1/topup (503 here).
    expect(e.message).toBe(
      "402 Balance cannot cover the estimated cost of this request; this gateway takes no payments: ask its operator for credit",
    );
    const raw = await oai.call("POST", "/v1/chat/completions", { model: "standin/echo", messages }, { authorization: `Bearer ${key}` });
    expect(raw.status).toBe(402);
    expect(Object.keys(raw.body)).toEqual(["error"]);
    expect(raw.body.error).toMatchObject({
      message: "Balance cannot cover the estimated cost of this request; this gateway takes no payments: ask its operator for credit",
      type: "insufficient_balance",
      code: "INSUFFICIENT_BALANCE",
      param: null,
      available_usdc: 100,
      topup: { endpoint: null },
    });
    expect(raw.body.error.required_usdc).toBeGreaterThan(100);
    expect(await oai.ledgerState(wallet)).toEqual({ balance: 100, locked: 0 });
  });

  test("401 AuthenticationError, 400 validation, 502 naming the provider, 404 on a model's page", async () => {
    const bad = await rejection(oai.openai("sk-" + "0".repeat(64)).chat.completions.create({ model: "standin/echo", messages }));
    expect(bad).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(bad).toMatchObject({ code: "UNAUTHORIZED", type: "authentication_error", message: "401 Missing or invalid credentials" });

    const { key, wallet } = await oai.newWallet(1);
    const client = oai.openai(key);
    const invalid = await rejection(client.chat.completions.create({ model: "standin/echo", messages: [] }));
    expect(invalid).toBeInstanceOf(OpenAI.BadRequestError);
    expect(invalid.code).toBe("VALIDATION_ERROR");
    expect(invalid.message).toStartWith("400 ");
    expect(invalid.message).not.toContain("VALIDATION_ERROR");

    const failed = await rejection(client.chat.completions.create({ model: "dead/echo", messages }));
    expect(failed).toBeInstanceOf(OpenAI.InternalServerError);
    expect(failed).toMatchObject({ status: 502, code: "UPSTREAM_ERROR", type: "server_error" });
    expect(failed.message).toBe('502 The model provider "dead" failed to answer');
    expect(await oai.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });

    const missing = await rejection(client.models.retrieve("nope/nothing"));
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
    expect(missing).toMatchObject({ code: "NOT_FOUND", message: "404 No such model" });
  });

  test("a stream's mid-stream failure is the same event in both shapes", async () => {
    for (const gw of [spec, oai]) {
      const { key } = await gw.newWallet(1);
      const res = await gw.call(
        "POST",
        "/v1/chat/completions",
        { model: "standin/stream-error", messages, stream: true },
        { authorization: `Bearer ${key}` },
      );
      expect(res.status).toBe(200);
      const events = (res.body as string).split("\n\n").filter(Boolean);
      expect(events.at(-1)).toBe("data: [DONE]");
      expect(JSON.parse(events.at(-2)!.slice(6))).toEqual({
        error: { message: "The model provider failed during the stream", type: "upstream_error" },
      });
    }
  });

  test("routes that are not OpenAI's keep the spec's body", async () => {
    const usage = await oai.call("GET", `/v1/usage/0x${"1".repeat(40)}`);
    expect(usage).toMatchObject({ status: 401, body: { error: "UNAUTHORIZED", message: "Missing or invalid credentials" } });
    const keys = await oai.call("GET", "/v1/auth/keys");
    expect(keys.status).toBe(401);
    expect(keys.body.error).toBe("UNAUTHORIZED");
  });
});

describe("the one conversion (toOpenaiShape)", () => {
  test("the gateway's fields move inside error; any other top-level field (x402's) stays at the top level", () => {
    const accepts = [{ scheme: "exact", network: "base" }];
    const body = {
      error: "INSUFFICIENT_BALANCE",
      message: "Balance cannot cover the estimated cost of this request",
      available_usdc: 1,
      required_usdc: 2,
      topup: { endpoint: "/v1/topup" },
      x402Version: 2,
      accepts,
    };
    expect(toOpenaiShape(body, 402)).toEqual({
      x402Version: 2,
      accepts,
      error: {
        message: "Balance cannot cover the estimated cost of this request",
        type: "insufficient_balance",
        code: "INSUFFICIENT_BALANCE",
        param: null,
        available_usdc: 1,
        required_usdc: 2,
        topup: { endpoint: "/v1/topup" },
      },
    });
    expect(toOpenaiShape({ error: "RATE_LIMITED", message: "m" }, 429)).toEqual({
      error: { message: "m", type: "rate_limit_error", code: "RATE_LIMITED", param: null },
    });
  });
});
