/**
 * When `serve` adds the local test model (local/echo): only when nothing else would be served, no MODELS_FILE was
 * given and the deployment is local. A provider key, a catalog of one's own or a staging/production deployment
 * keeps it off.
 */
import { expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig } from "../src/config.ts";
import { LOCAL_MODEL_ID, withLocalModel } from "../src/providers/localModel.ts";

const emptyCatalog = join(mkdtempSync(join(tmpdir(), "gw-localmodel-")), "models.json");
writeFileSync(emptyCatalog, JSON.stringify({ providers: {}, models: [] }));

test("no provider key and no MODELS_FILE: the local model is on, beside the default catalog's providers (all off)", () => {
  const c = loadConfig({});
  expect(c.catalog.models.size).toBe(0);
  expect(c.localModel).toBe(true);
  const served = withLocalModel(c.catalog, "http://127.0.0.1:1/v1");
  expect([...served.models.keys()]).toEqual([LOCAL_MODEL_ID]);
  expect(served.models.get(LOCAL_MODEL_ID)!.provider).toEqual({ name: "local", type: "openai", baseUrl: "http://127.0.0.1:1/v1" });
  expect(served.providers.at(-1)).toEqual({ name: "local", state: "keyless" });
});

test.each([
  ["a provider key is set", { OPENAI_API_KEY: "sk-test" }],
  ["another provider's key is set", { ANTHROPIC_API_KEY: "sk-ant-test" }],
  ["MODELS_FILE names a catalog, even an empty one", { MODELS_FILE: emptyCatalog }],
])("off when %s", (_why, env) => {
  expect(loadConfig(env).localModel).toBe(false);
});

test("off outside a local deployment, where a gateway with no provider serves nothing rather than an echo", () => {
  const payments = {
    PAY_TO: "0x000000000000000000000000000000000000dEaD",
    FACILITATOR: "local",
    RPC_URL: "http://127.0.0.1:8545",
    RELAYER_PRIVATE_KEY: "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
  };
  expect(loadConfig({ DEPLOYMENT: "staging", ...payments }).localModel).toBe(false);
  expect(loadConfig({ DEPLOYMENT: "production", ...payments }).localModel).toBe(false);
  expect(loadConfig({ DEPLOYMENT: "local", ...payments }).localModel).toBe(true);
});
