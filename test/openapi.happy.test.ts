/**
 * The OpenAPI document a client generator reads: valid by a standard validator, complete against the spec's
 * paths, and true to the live answers — each route's real 2xx and error bodies are checked against the schema the
 * document gives for that status and media type (ajv), and the headers it declares are sent.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { validate, compileErrors } from "@readme/openapi-parser";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { parseAdmin } from "../src/admin/dispatch.ts";
import { BASE, startGateway, type TestGateway } from "./helpers/gateway.ts";
import { type Conformance, conformance } from "./helpers/openapi.ts";

let gw: TestGateway;
let doc: any;
let conforms: Conformance["conforms"];
let ajv: Conformance["ajv"];
let operation: Conformance["operation"];

beforeAll(async () => {
  gw = await startGateway();
  ({ doc, conforms, ajv, operation } = await conformance(gw));
}, 60_000);
afterAll(async () => {
  await gw?.close();
});

async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  return gw.handle(
    new Request(BASE + path, {
      method,
      headers: { "content-type": "application/json", ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
    }),
  );
}

/** A schema of the document by name, for assertions on its shape. */
const schema = (name: string) => doc.components.schemas[name];

describe("the document", () => {
  test("passes a standard OpenAPI validator", async () => {
    const result = await validate(structuredClone(doc));
    if (!result.valid) throw new Error(compileErrors(result));
    expect(doc.openapi).toStartWith("3.1");
    expect(doc.info.version).toBe("1.0.0");
  });

  test("has every path and method of the spec and of the extensions", () => {
    const expected = [
      "get /health",
      "get /metrics",
      "get /v1/models",
      "get /v1/models/{id}",
      "get /v1/auth/siwe",
      "post /v1/chat/completions",
      "post /v1/responses",
      "post /v1/topup",
      "get /v1/topups/{wallet}",
      "post /v1/auth/keys",
      "get /v1/auth/keys",
      "delete /v1/auth/keys/{key_id}",
      "get /v1/usage/{wallet}",
      "get /v1/usage/{wallet}/daily",
      "get /v1/balance/{wallet}",
    ];
    const documented = Object.entries<any>(doc.paths).flatMap(([p, item]) => Object.keys(item).map((m) => `${m} ${p}`));
    expect(documented.sort()).toEqual(expect.arrayContaining(expected.sort()));
    for (const [, item] of Object.entries<any>(doc.paths))
      for (const op of Object.values<any>(item)) expect(Object.keys(op.responses ?? {}).length).toBeGreaterThan(0);
  });

  test("named schemas, integer types, required SIWE fields, the 402 extras, an integer key_id", () => {
    for (const name of [
      "Error",
      "Model",
      "ModelList",
      "ChatCompletionRequest",
      "ChatCompletionResponse",
      "ChatCompletionChunk",
      "TopupRequest",
      "TopupResponse",
      "PaymentRequirements",
      "ApiKeyCreateRequest",
      "ApiKeyCreateResponse",
      "ApiKeySummary",
      "UsageResponse",
      "UsageKey",
      "BalanceResponse",
      "TopupsResponse",
    ]) {
      expect(schema(name)).toBeDefined();
    }
    expect(schema("Error").properties.error.enum).toEqual(
      expect.arrayContaining(["VALIDATION_ERROR", "INSUFFICIENT_BALANCE", "UPSTREAM_DEADLINE"]),
    );
    // Never Elysia's string-or-integer.
    expect(JSON.stringify(doc)).not.toContain('"format":"integer"');
    expect(schema("BalanceResponse").properties.available_usdc.type).toBe("integer");
    expect(schema("ApiKeyCreateRequest").required).toEqual(expect.arrayContaining(["message", "signature"]));
    expect(schema("SiweAuth").required).toEqual(expect.arrayContaining(["message", "signature"]));
    expect(schema("ApiKeyCreateResponse").properties.redeemed_credit_usdc.type).toBe("integer");
    expect(Object.keys(schema("InsufficientBalanceError").allOf[1].properties)).toEqual([
      "available_usdc",
      "required_usdc",
      "topup",
      "x402Version",
      "accepts",
    ]);
    const [, revoke] = operation("DELETE", "/v1/auth/keys/1");
    expect(revoke.parameters.find((p: any) => p.name === "key_id").schema.type).toBe("integer");
    expect(revoke.requestBody.content["application/json"].schema.$ref).toBe("#/components/schemas/SiweAuth");
  });

  test("security schemes, payment and rate-limit headers are declared and used", () => {
    expect(Object.keys(doc.components.securitySchemes).sort()).toEqual([
      "apiKey",
      "apiKeyQuery",
      "siweMessage",
      "siweSignature",
      "x402Payment",
      "x402PaymentV2",
    ]);
    expect(doc.components.securitySchemes.apiKeyQuery).toMatchObject({ type: "apiKey", in: "query", name: "api_key" });
    for (const h of ["PAYMENT-REQUIRED", "X-PAYMENT-RESPONSE", "PAYMENT-RESPONSE", "X-RateLimit-Remaining", "Retry-After", "X-Request-Id"])
      expect(doc.components.headers[h]).toBeDefined();
    // The key, alone or with an x402 payment (v2 or v1) for the terms of a 402.
    const paidCall = [{ apiKey: [] }, { apiKey: [], x402PaymentV2: [] }, { apiKey: [], x402Payment: [] }];
    for (const path of ["/v1/chat/completions", "/v1/responses", "/v1/messages"])
      expect(operation("POST", path)[1].security).toEqual(paidCall);
    expect(operation("GET", "/v1/topups/0x")[1].security).toEqual([
      { apiKey: [] },
      { apiKeyQuery: [] },
      { siweMessage: [], siweSignature: [] },
    ]);
    const topup = operation("POST", "/v1/topup")[1];
    expect(topup.security).toEqual([{}, { x402Payment: [] }, { x402PaymentV2: [] }]);
    expect(Object.keys(topup.responses["402"].headers)).toContain("PAYMENT-REQUIRED");
    expect(Object.keys(topup.responses["200"].headers)).toEqual(expect.arrayContaining(["X-PAYMENT-RESPONSE", "PAYMENT-RESPONSE"]));
    expect(Object.keys(operation("POST", "/v1/chat/completions")[1].responses["429"].headers)).toEqual(
      expect.arrayContaining(["Retry-After", "X-RateLimit-Limit"]),
    );
  });
});

describe("live answers match the document", () => {
  test("public routes: health, models, balance, metrics; 404-shaped and 400 errors", async () => {
    await conforms("GET", "/health", await call("GET", "/health"));
    const models = await conforms("GET", "/v1/models", await call("GET", "/v1/models"));
    expect(models.data.length).toBeGreaterThan(0);
    await conforms("GET", "/v1/models/x", await call("GET", `/v1/models/${models.data[0].id}`));
    await conforms("GET", "/v1/models/x", await call("GET", "/v1/models/nope/nothing"));
    await conforms("GET", "/v1/auth/siwe", await call("GET", "/v1/auth/siwe"));
    await conforms(
      "GET",
      "/v1/balance/0x0000000000000000000000000000000000000001",
      await call("GET", "/v1/balance/0x0000000000000000000000000000000000000001"),
    );
    await conforms("GET", "/v1/balance/nope", await call("GET", "/v1/balance/nope"));
    await conforms("GET", "/metrics", await call("GET", "/metrics"));
  });

  test("keys: create (with a redeem code), list, revoke, and their 400/401/404", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const wallet = account.address.toLowerCase();
    const printed = await parseAdmin(["redeem-codes", "create", "--usd", "1"])(gw.services);
    const code = printed
      .split("\n")
      .find((l) => l && !l.startsWith("#"))!
      .trim();
    const created = await conforms(
      "POST",
      "/v1/auth/keys",
      await call("POST", "/v1/auth/keys", { ...(await gw.signIn(account)), label: "doc", redeem_code: code }),
    );
    expect(created.redeemed_credit_usdc).toBe(1_000_000);
    await conforms("POST", "/v1/auth/keys", await call("POST", "/v1/auth/keys", { ...(await gw.signIn(account)), label: "x".repeat(101) }));
    await conforms("POST", "/v1/auth/keys", await call("POST", "/v1/auth/keys", {}));
    const query = new URLSearchParams(await gw.signIn(account)).toString();
    const list = await conforms("GET", "/v1/auth/keys", await call("GET", `/v1/auth/keys?${query}`));
    expect(list.data).toHaveLength(1);
    await conforms("GET", "/v1/auth/keys", await call("GET", "/v1/auth/keys"));
    await conforms("DELETE", "/v1/auth/keys/1", await call("DELETE", `/v1/auth/keys/${created.id}`, await gw.signIn(account)));
    await conforms("DELETE", "/v1/auth/keys/1", await call("DELETE", "/v1/auth/keys/999999", await gw.signIn(account)));
    await conforms("DELETE", "/v1/auth/keys/1", await call("DELETE", "/v1/auth/keys/1e0", await gw.signIn(account)));
    await conforms("DELETE", "/v1/auth/keys/1", await call("DELETE", "/v1/auth/keys/1"));
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
  });

  test("usage and top-up history: 200 with a key, with SIWE, with api_key; 401 without", async () => {
    const { account, wallet, key } = await gw.newWallet(1);
    await gw.openai(key).chat.completions.create({ model: "standin/echo", messages: [{ role: "user", content: "hi" }] });
    await gw.services.chat.idle();
    const usage = await conforms(
      "GET",
      `/v1/usage/${wallet}`,
      await call("GET", `/v1/usage/${wallet}`, undefined, { authorization: `Bearer ${key}` }),
    );
    expect(usage.keys[0].request_count).toBe(1);
    const query = new URLSearchParams(await gw.signIn(account)).toString();
    await conforms("GET", `/v1/usage/${wallet}`, await call("GET", `/v1/usage/${wallet}?${query}`));
    await conforms("GET", `/v1/usage/${wallet}`, await call("GET", `/v1/usage/${wallet}`));
    await gw.services.flusher.drain();
    const daily = await conforms(
      "GET",
      `/v1/usage/${wallet}/daily`,
      await call("GET", `/v1/usage/${wallet}/daily?days=2`, undefined, { authorization: `Bearer ${key}` }),
    );
    expect(daily.days.at(-1).keys[0].request_count).toBe(1);
    await conforms(
      "GET",
      `/v1/usage/${wallet}/daily`,
      await call("GET", `/v1/usage/${wallet}/daily?days=0`, undefined, { authorization: `Bearer ${key}` }),
    );
    await conforms("GET", `/v1/usage/${wallet}/daily`, await call("GET", `/v1/usage/${wallet}/daily`));
    await conforms("GET", `/v1/topups/${wallet}`, await call("GET", `/v1/topups/${wallet}?api_key=${key}`));
    await conforms("GET", `/v1/topups/${wallet}`, await call("GET", `/v1/topups/${wallet}`));
  });

  test("chat: JSON, stream (every chunk a ChatCompletionChunk), stream error event, 400, 401, 402, the provider's 429, 502", async () => {
    const { key } = await gw.newWallet(1);
    const auth = { authorization: `Bearer ${key}` };
    const messages = [{ role: "user", content: "hi" }];
    await conforms("POST", "/v1/chat/completions", await call("POST", "/v1/chat/completions", { model: "standin/echo", messages }, auth));

    const events = async (model: string) => {
      const text: string = await conforms(
        "POST",
        "/v1/chat/completions",
        await call("POST", "/v1/chat/completions", { model, messages, stream: true, stream_options: { include_usage: true } }, auth),
      );
      const data = text
        .split("\n\n")
        .filter(Boolean)
        .map((e) => e.replace(/^data: /, ""));
      expect(data.at(-1)).toBe("[DONE]");
      return data.slice(0, -1).map((d) => JSON.parse(d));
    };
    const chunk = ajv.getSchema("openapi.json#/components/schemas/ChatCompletionChunk")!;
    const streamError = ajv.getSchema("openapi.json#/components/schemas/StreamErrorEvent")!;
    for (const c of await events("standin/echo")) expect([chunk(c), ajv.errorsText(chunk.errors)]).toEqual([true, "No errors"]);
    const failed = await events("standin/stream-error");
    expect(streamError(failed.at(-1))).toBe(true);
    for (const c of failed.slice(0, -1)) expect(chunk(c)).toBe(true);

    await conforms("POST", "/v1/chat/completions", await call("POST", "/v1/chat/completions", { model: "standin/echo" }, auth));
    await conforms("POST", "/v1/chat/completions", await call("POST", "/v1/chat/completions", { model: "nope/none", messages }, auth));
    await conforms("POST", "/v1/chat/completions", await call("POST", "/v1/chat/completions", { model: "standin/echo", messages }));
    await conforms(
      "POST",
      "/v1/chat/completions",
      await call("POST", "/v1/chat/completions", { model: "standin/fail-500", messages }, auth),
    );
    await conforms(
      "POST",
      "/v1/chat/completions",
      await call("POST", "/v1/chat/completions", { model: "standin/fail-429", messages }, auth),
    );
    await conforms(
      "POST",
      "/v1/chat/completions",
      await call(
        "POST",
        "/v1/chat/completions",
        { model: "standin/echo", messages, max_tokens: 4096 },
        { authorization: `Bearer ${(await gw.newWallet(0)).key}` },
      ),
    );
    const budgeted = await gw.newWallet(1, { budget_usdc: 1 });
    await conforms(
      "POST",
      "/v1/chat/completions",
      await call("POST", "/v1/chat/completions", { model: "standin/echo", messages }, { authorization: `Bearer ${budgeted.key}` }),
    );
  });

  test("responses: JSON, stream, and its errors in OpenAI's shape (400, 401, 402, 404, 502)", async () => {
    const { key } = await gw.newWallet(1);
    const auth = { authorization: `Bearer ${key}` };
    const ok = await conforms("POST", "/v1/responses", await call("POST", "/v1/responses", { model: "standin/echo", input: "hi" }, auth));
    expect(ok.object).toBe("response");
    const text: string = await conforms(
      "POST",
      "/v1/responses",
      await call("POST", "/v1/responses", { model: "standin/echo", input: "hi", stream: true }, auth),
    );
    expect(text.split("\n\n").filter(Boolean).at(-1)).toStartWith("event: response.completed\n");
    await conforms("POST", "/v1/responses", await call("POST", "/v1/responses", { model: "nope/none", input: "hi" }, auth));
    await conforms(
      "POST",
      "/v1/responses",
      await call("POST", "/v1/responses", { model: "standin/echo", input: "hi", previous_response_id: "resp_x" }, auth),
    );
    await conforms(
      "POST",
      "/v1/responses",
      await call("POST", "/v1/responses", { model: "standin/echo", input: [{ type: "item_reference", id: "msg_x" }] }, auth),
    );
    await conforms("POST", "/v1/responses", await call("POST", "/v1/responses", { model: "standin/echo", input: "hi" }));
    await conforms("POST", "/v1/responses", await call("POST", "/v1/responses", { model: "standin/fail-500", input: "hi" }, auth));
    await conforms(
      "POST",
      "/v1/responses",
      await call(
        "POST",
        "/v1/responses",
        { model: "standin/echo", input: "hi", max_output_tokens: 4096 },
        { authorization: `Bearer ${(await gw.newWallet(0)).key}` },
      ),
    );
  });

  test("chat: 429 RATE_LIMITED with its headers", async () => {
    const limited = await startGateway({ RATE_LIMIT_REQUESTS: "1" });
    try {
      const { key } = await limited.newWallet(1);
      const body = { model: "standin/echo", messages: [{ role: "user", content: "hi" }] };
      const send = () =>
        limited.handle(
          new Request(`${BASE}/v1/chat/completions`, {
            method: "POST",
            headers: { authorization: `Bearer ${key}` },
            body: JSON.stringify(body),
          }),
        );
      expect((await send()).status).toBe(200);
      const res = await send();
      expect(res.status).toBe(429);
      for (const h of ["Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"])
        expect(res.headers.has(h)).toBe(true);
      await conforms("POST", "/v1/chat/completions", res);
      await limited.services.chat.idle();
    } finally {
      await limited.close();
    }
  }, 60_000);

  test("docs UI: the page and its assets come from the gateway (the pinned package), not a CDN", async () => {
    const page = await call("GET", "/docs");
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain("/docs/assets/swagger-ui-bundle.js");
    expect(html).not.toMatch(/unpkg|jsdelivr|cdn\./);
    const js = await call("GET", "/docs/assets/swagger-ui-bundle.js");
    expect(js.status).toBe(200);
    expect(js.headers.get("content-type")).toStartWith("text/javascript");
    expect(await js.text()).toBe(await Bun.file("node_modules/swagger-ui-dist/swagger-ui-bundle.js").text());
    expect((await call("GET", "/docs/assets/swagger-ui.css")).status).toBe(200);
  });
});
