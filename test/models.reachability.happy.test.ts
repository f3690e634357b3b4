/**
 * GET /v1/models says which models can answer: keyless providers (local servers) are probed in the background, at
 * start and on a timer, and a model whose provider did not answer is listed with `available: false`; a provider with
 * a key is never probed. A model whose provider is down answers 502 naming the provider.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { catalogModel, STANDIN_KEY } from "./helpers/catalog.ts";
import { startGateway, type TestGateway } from "./helpers/gateway.ts";

/** A local model server as far as the probe sees it: GET /v1/models, each request counted. */
function modelServer(port = 0) {
  const server = Bun.serve({
    port,
    hostname: "127.0.0.1",
    fetch(req) {
      const path = new URL(req.url).pathname;
      hits.push(`${server.port} ${req.method} ${path}`);
      return path === "/v1/models" ? Response.json({ object: "list", data: [] }) : new Response("not here", { status: 404 });
    },
  });
  return server;
}
const hits: string[] = [];

let gw: TestGateway;
let live: ReturnType<typeof modelServer>;
let hosted: ReturnType<typeof modelServer>;
// Nothing listens on the discard port (the other tests' "dead" provider uses it too).
const closedPort = 9;
beforeAll(async () => {
  live = modelServer();
  hosted = modelServer();
  const catalog = {
    providers: {
      local: { type: "openai", baseUrl: `http://127.0.0.1:${live.port}/v1` },
      ollama: { type: "openai", baseUrl: `http://127.0.0.1:${closedPort}/v1` },
      claudelocal: { type: "anthropic", baseUrl: `http://127.0.0.1:${live.port}/v1` },
      hosted: { type: "openai", baseUrl: `http://127.0.0.1:${hosted.port}/v1`, apiKeyEnv: "STANDIN_KEY" },
    },
    models: [
      catalogModel("local", "echo"),
      catalogModel("ollama", "llama3.2"),
      catalogModel("claudelocal", "claude"),
      catalogModel("hosted", "big"),
    ],
  };
  const file = join(mkdtempSync(join(tmpdir(), "gw-reach-")), "models.json");
  writeFileSync(file, JSON.stringify(catalog));
  gw = await startGateway({ MODELS_FILE: file, STANDIN_KEY, PROVIDER_PROBE_INTERVAL_S: "1" });
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await live?.stop(true);
  await hosted?.stop(true);
});

async function availability(): Promise<Record<string, boolean>> {
  const res = await gw.call("GET", "/v1/models");
  expect(res.status).toBe(200);
  return Object.fromEntries(res.body.data.map((m: { id: string; available: boolean }) => [m.id, m.available]));
}

/** Waits, round after round of the timer, until the list shows `id` as `available`. */
async function untilListed(id: string, available: boolean): Promise<void> {
  while ((await availability())[id] !== available) await gw.services.reachability.nextRound();
}

describe("reachability of keyless providers", () => {
  test("before the first probe every model is listed as available; the probe at start marks the closed port", async () => {
    expect(await availability()).toEqual({ "local/echo": true, "ollama/llama3.2": true, "claudelocal/claude": true, "hosted/big": true });
    const first = gw.services.reachability.nextRound();
    gw.services.reachability.start();
    await first;
    expect(await availability()).toEqual({ "local/echo": true, "ollama/llama3.2": false, "claudelocal/claude": true, "hosted/big": true });
    // The spec's fields stay; `available` is beside them.
    const one = await gw.call("GET", "/v1/models/ollama/llama3.2");
    expect(one.body).toEqual({
      id: "ollama/llama3.2",
      object: "model",
      name: "llama3.2",
      provider: "ollama",
      contextLength: 128_000,
      promptPricePer1MTokens: 2.5,
      completionPricePer1M: 10,
      kind: "chat",
      aliases: [],
      available: false,
    });
    // Both keyless providers on the live server were asked for their model list; the keyed one never.
    expect(hits.filter((h) => h.startsWith(`${live.port} GET /v1/models`)).length).toBeGreaterThanOrEqual(2);
    expect(hits.filter((h) => h.startsWith(`${hosted.port} `))).toEqual([]);
  });

  test("a model whose provider is down: 502 naming the provider, nothing held or charged", async () => {
    const { key, wallet } = await gw.newWallet(1);
    const res = await gw.call(
      "POST",
      "/v1/chat/completions",
      { model: "ollama/llama3.2", messages: [{ role: "user", content: "hi" }] },
      { authorization: `Bearer ${key}` },
    );
    expect(res.status).toBe(502);
    expect(res.body).toEqual({ error: "UPSTREAM_ERROR", message: 'The model provider "ollama" failed to answer' });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
  });

  test("the timer sees a server stop and come back", async () => {
    const port = live.port!;
    await live.stop(true);
    await untilListed("local/echo", false);
    expect((await availability())["claudelocal/claude"]).toBe(false);
    live = modelServer(port);
    await untilListed("local/echo", true);
    expect(await availability()).toEqual({ "local/echo": true, "ollama/llama3.2": false, "claudelocal/claude": true, "hosted/big": true });
    expect(hits.filter((h) => h.startsWith(`${hosted.port} `))).toEqual([]);
  }, 30_000);
});
