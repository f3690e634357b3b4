/**
 * A first model in one step: the shipped local catalog with a keyless provider serves a chat; a catalog model whose
 * provider is off says so; answers name the model the client asked for; GET /v1/models/{id}.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startEchoModel } from "../scripts/echo-model.ts";
import { startGateway, type TestGateway } from "./helpers/gateway.ts";

let gw: TestGateway;
let local: TestGateway;
let echo: ReturnType<typeof startEchoModel>;
beforeAll(async () => {
  gw = await startGateway();
  echo = startEchoModel({ port: 0 });
  // The shipped sample catalog, with its echo provider on this test's port and one keyed provider whose key is unset.
  const catalog = JSON.parse(readFileSync(join(import.meta.dir, "../config/models.local.json"), "utf8"));
  catalog.providers.echo.baseUrl = echo.url;
  catalog.providers.cloud = { type: "openai", baseUrl: "https://api.example.com/v1", apiKeyEnv: "CLOUD_API_KEY_UNSET" };
  catalog.models.push({ ...catalog.models[0], id: "cloud/big", provider: "cloud", upstreamModel: "big", name: "Big" });
  const file = join(mkdtempSync(join(tmpdir(), "gw-local-")), "models.json");
  writeFileSync(file, JSON.stringify(catalog));
  local = await startGateway({ MODELS_FILE: file });
}, 90_000);
afterAll(async () => {
  await gw?.close();
  await local?.close();
  await echo?.stop();
});

describe("keyless local provider (config/models.local.json)", () => {
  test("serves a chat, JSON and streamed, with no Authorization header upstream", async () => {
    const { key, wallet } = await local.newWallet(1);
    const client = local.openai(key);
    const answer = await client.chat.completions.create({ model: "echo/echo", messages: [{ role: "user", content: "hello gateway" }] });
    expect(answer.model).toBe("echo/echo");
    expect(answer.choices[0]!.message.content).toBe("echo: hello gateway");
    expect(echo.requests.at(-1)).toMatchObject({ authorization: null, body: { model: "echo" } });

    const stream = await client.chat.completions.create({
      model: "echo/echo",
      messages: [{ role: "user", content: "a b c" }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    for await (const chunk of stream) {
      expect(chunk.model).toBe("echo/echo");
      text += chunk.choices[0]?.delta?.content ?? "";
    }
    expect(text).toBe("echo: a b c");
    expect(echo.requests.at(-1)!.authorization).toBeNull();
    expect((await local.ledgerState(wallet)).balance).toBeLessThan(1_000_000); // both answers were charged
  });

  test("a catalog model whose provider has no key: 400 UNKNOWN_MODEL naming the provider; 404 on its page", async () => {
    const { key, wallet } = await local.newWallet(1);
    const res = await local.call(
      "POST",
      "/v1/chat/completions",
      { model: "cloud/big", messages: [{ role: "user", content: "x" }] },
      { authorization: `Bearer ${key}` },
    );
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      error: "UNKNOWN_MODEL",
      message: 'Model "cloud/big" is in the catalog but its provider "cloud" is not configured (CLOUD_API_KEY_UNSET is unset)',
    });
    expect(await local.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
    const page = await local.call("GET", "/v1/models/cloud/big");
    expect(page).toMatchObject({ status: 404, body: { error: "NOT_FOUND" } });
    expect(page.body.message).toContain('provider "cloud" is not configured');
    expect((await local.call("GET", "/v1/models")).body.data.map((m: { id: string }) => m.id)).toEqual(["echo/echo", "ollama/llama3.2"]);
    expect(local.services.config.catalog.providers).toEqual([
      { name: "echo", state: "keyless" },
      { name: "ollama", state: "keyless" },
      { name: "cloud", state: "off", apiKeyEnv: "CLOUD_API_KEY_UNSET" },
    ]);
  });

  test("a model that is in no catalog: 400 UNKNOWN_MODEL", async () => {
    const { key } = await local.newWallet(1);
    const res = await local.call(
      "POST",
      "/v1/chat/completions",
      { model: "nope/nope", messages: [{ role: "user", content: "x" }] },
      { authorization: `Bearer ${key}` },
    );
    expect(res).toMatchObject({
      status: 400,
      body: { error: "UNKNOWN_MODEL", message: expect.stringMatching(/^Unknown model "nope\/nope"/) },
    });
  });
});

describe("the answer names the requested model", () => {
  test("OpenAI-type provider: JSON and every stream chunk carry the catalog id, not the upstream name", async () => {
    const { key } = await gw.newWallet(1);
    const client = gw.openai(key);
    const answer = await client.chat.completions.create({ model: "standin/echo", messages: [{ role: "user", content: "hi" }] });
    expect(answer.model).toBe("standin/echo");
    for (const include_usage of [false, true]) {
      const stream = await client.chat.completions.create({
        model: "standin/echo",
        messages: [{ role: "user", content: "hi" }],
        stream: true,
        stream_options: { include_usage },
      });
      let chunks = 0;
      for await (const chunk of stream) {
        expect(chunk.model).toBe("standin/echo");
        chunks++;
      }
      expect(chunks).toBeGreaterThan(2);
    }
  });

  test("Anthropic-type provider: the same", async () => {
    const { key } = await gw.newWallet(1);
    const client = gw.openai(key);
    const answer = await client.chat.completions.create({ model: "claude/claude-sonnet-4-6", messages: [{ role: "user", content: "hi" }] });
    expect(answer.model).toBe("claude/claude-sonnet-4-6");
    const stream = await client.chat.completions.create({
      model: "claude/claude-sonnet-4-6",
      messages: [{ role: "user", content: "hi" }],
      stream: true,
      stream_options: { include_usage: true },
    });
    for await (const chunk of stream) expect(chunk.model).toBe("claude/claude-sonnet-4-6");
  });
});

describe("GET /v1/models/{id}", () => {
  test("answers one model, its id containing a slash", async () => {
    const res = await gw.call("GET", "/v1/models/standin/echo");
    expect(res.status).toBe(200);
    const listed = (await gw.call("GET", "/v1/models")).body.data.find((m: { id: string }) => m.id === "standin/echo");
    expect(res.body).toEqual(listed);
    expect(res.body).toMatchObject({ id: "standin/echo", object: "model", provider: "standin", promptPricePer1MTokens: 2.5 });
  });

  test("the official SDK's models.retrieve works", async () => {
    const { key } = await gw.newWallet(0);
    expect(await gw.openai(key).models.retrieve("standin/echo")).toMatchObject({ id: "standin/echo" });
  });

  test("404 NOT_FOUND for an unknown id", async () => {
    expect(await gw.call("GET", "/v1/models/openai/gpt-4o")).toMatchObject({
      status: 404,
      body: { error: "NOT_FOUND", message: "No such model" },
    });
    expect(await gw.call("GET", "/v1/models/nope")).toMatchObject({ status: 404, body: { error: "NOT_FOUND" } });
  });
});
