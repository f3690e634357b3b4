import { availableParallelism } from "node:os";
import { describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, loadConfig } from "../src/config.ts";
import { findModel, renderModels, unknownModelReason } from "../src/providers/catalog.ts";

const dir = mkdtempSync(join(tmpdir(), "gw-config-"));
function catalogFile(content: unknown): string {
  const f = join(dir, `${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(f, typeof content === "string" ? content : JSON.stringify(content));
  return f;
}
const goodModel = {
  id: "p/m",
  provider: "p",
  upstreamModel: "m",
  name: "M",
  contextLength: 1000,
  maxOutputTokens: 100,
  promptPricePer1MTokens: 1,
  completionPricePer1M: 2,
  costPromptPer1M: 0.5,
  costCompletionPer1M: 1,
};
const good = { providers: { p: { type: "openai", baseUrl: "http://127.0.0.1:1/v1", apiKeyEnv: "P_KEY" } }, models: [goodModel] };

function problem(env: Record<string, string>): string {
  try {
    loadConfig({ MODELS_FILE: catalogFile(good), P_KEY: "k", ...env });
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return (e as ConfigError).message;
  }
  throw new Error("configuration was accepted");
}

describe("configuration is validated once, naming the variable", () => {
  test("defaults", () => {
    const c = loadConfig({ MODELS_FILE: catalogFile(good), P_KEY: "k" });
    expect(c).toMatchObject({ port: 8080, host: "0.0.0.0", deployment: "local", chainId: 84532, siweChainIds: [84532], ledgerShards: 48 });
    expect(c.rateLimitRequests).toBe(600);
    expect(c.rateLimitWindowMs).toBe(60_000);
    expect(c.upstreamTimeoutMs).toBe(120_000);
    expect(c.streamMaxMs).toBe(7_200_000);
    expect(c.maxBodyBytes).toBe(32 * 1024 * 1024);
    expect(c.bodyTimeoutMs).toBe(60_000);
    expect(c.responsesStoreTtlS).toBe(3600);
    expect(c).toMatchObject({
      responsesStoreItemBytes: 1024 * 1024,
      responsesStoreConversationBytes: 4 * 1024 * 1024,
      responsesStoreWalletBytes: 64 * 1024 * 1024,
      responsesStoreWalletResponses: 10_000,
      maxKeysPerWallet: 100,
      idleTimeoutS: 75,
    });
    // Payment URLs: PUBLIC_URL, else the SIWE domain (https outside local mode), never a request's Host.
    expect(c.publicUrl).toBe("http://localhost:8080");
    const named = { MODELS_FILE: catalogFile(good), P_KEY: "k", SIWE_DOMAIN: "gw.example.com" };
    expect(loadConfig(named).publicUrl).toBe("http://gw.example.com");
    expect(loadConfig({ ...named, PUBLIC_URL: "https://api.example.com/gw/" }).publicUrl).toBe("https://api.example.com/gw");
    expect(c.workers).toBe(1);
    expect(loadConfig({ MODELS_FILE: catalogFile(good), P_KEY: "k", WORKERS: "auto" }).workers).toBe(availableParallelism());
    expect(loadConfig({ MODELS_FILE: catalogFile(good), P_KEY: "k", WORKERS: "3" }).workers).toBe(3);
    expect(c.catalog.models.get("p/m")).toMatchObject({ promptPico: 1_000_000, costPromptPico: 500_000 });
    expect(c.redisCluster).toBeUndefined();
  });

  test("REDIS_CLUSTER_NODES: seeds and the password of a Redis Cluster", () => {
    const c = loadConfig({
      MODELS_FILE: catalogFile(good),
      P_KEY: "k",
      REDIS_CLUSTER_NODES: "10.0.0.1:7000, redis-b.internal:7001,[::1]:7002",
      REDIS_PASSWORD: "pw",
    });
    expect(c.redisCluster).toEqual({
      cluster: [
        { host: "10.0.0.1", port: 7000 },
        { host: "redis-b.internal", port: 7001 },
        { host: "::1", port: 7002 },
      ],
      password: "pw",
    });
    expect(c.redisUrl).toBeUndefined();
  });

  test.each([
    [{ PORT: "eighty" }, /^PORT: /],
    [{ PORT: "70000" }, /^PORT: /],
    [{ REDIS_URL: "localhost:6379" }, /^REDIS_URL: /],
    [{ DATABASE_URL: "mysql://x" }, /^DATABASE_URL: /],
    [{ DEPLOYMENT: "prod" }, /^DEPLOYMENT: /],
    [{ LOG_LEVEL: "loud" }, /^LOG_LEVEL: /],
    [{ PROVIDER_PROBE_INTERVAL_S: "0" }, /^PROVIDER_PROBE_INTERVAL_S: must be between 1 and /],
    [{ ERROR_SHAPE: "OpenAI" }, /^ERROR_SHAPE: must be one of spec, openai, got "OpenAI"$/],
    [{ RATE_LIMIT_REQUESTS: "-1" }, /^RATE_LIMIT_REQUESTS: /],
    [{ UPSTREAM_TIMEOUT_MS: "0" }, /^UPSTREAM_TIMEOUT_MS: /],
    [{ STREAM_MAX_MS: "2h" }, /^STREAM_MAX_MS: /],
    [{ RESPONSES_STORE_TTL_S: "1h" }, /^RESPONSES_STORE_TTL_S: must be a whole number/],
    [{ RESPONSES_STORE_TTL_S: "0" }, /^RESPONSES_STORE_TTL_S: must be between 1 and /],
    [{ PUBLIC_URL: "gw.example.com" }, /^PUBLIC_URL: is not a URL$/],
    [{ PUBLIC_URL: "ftp://gw.example.com" }, /^PUBLIC_URL: must start with http: or https:$/],
    [{ RESPONSES_STORE_MAX_ITEM_BYTES: "1MiB" }, /^RESPONSES_STORE_MAX_ITEM_BYTES: must be a whole number/],
    [{ RESPONSES_STORE_MAX_WALLET_RESPONSES: "0" }, /^RESPONSES_STORE_MAX_WALLET_RESPONSES: must be between 1 and /],
    [{ MAX_KEYS_PER_WALLET: "0" }, /^MAX_KEYS_PER_WALLET: must be between 1 and /],
    [{ IDLE_TIMEOUT_S: "256" }, /^IDLE_TIMEOUT_S: must be between 1 and 255/],
    [{ WORKERS: "all" }, /^WORKERS: must be a whole number or "auto", got "all"$/],
    [{ WORKERS: "0" }, /^WORKERS: must be between 1 and 64/],
    [{ MAX_BODY_BYTES: "32MiB" }, /^MAX_BODY_BYTES: must be a whole number/],
    [{ MAX_BODY_BYTES: "100" }, /^MAX_BODY_BYTES: must be between 1024 and /],
    [{ BODY_TIMEOUT_MS: "0" }, /^BODY_TIMEOUT_MS: must be between 100 and /],
    [{ SIWE_CHAIN_IDS: "1,base" }, /^SIWE_CHAIN_IDS: /],
    [{ SIWE_DOMAIN: "https://x.test/" }, /^SIWE_DOMAIN: /],
    [{ REDIS_CLUSTER_NODES: "10.0.0.1:7000", REDIS_URL: "redis://10.0.0.1:6379" }, /^REDIS_CLUSTER_NODES: and REDIS_URL are both set/],
    [{ REDIS_CLUSTER_NODES: "10.0.0.1" }, /^REDIS_CLUSTER_NODES: must be comma-separated host:port seeds, got "10.0.0.1"$/],
    [{ REDIS_CLUSTER_NODES: "10.0.0.1:7000,redis://x:1" }, /^REDIS_CLUSTER_NODES: must be comma-separated host:port seeds/],
    [{ REDIS_PASSWORD: "secret" }, /^REDIS_PASSWORD: is for REDIS_CLUSTER_NODES/],
  ])("refused: %o", (env, expected) => {
    expect(problem(env as Record<string, string>)).toMatch(expected);
  });

  test.each([
    ["not JSON", "{", /invalid JSON/],
    [
      "price with 7 decimals",
      { ...good, models: [{ ...goodModel, promptPricePer1MTokens: 0.1234567 }] },
      /promptPricePer1MTokens has more than 6 decimals/,
    ],
    ["unknown provider", { ...good, models: [{ ...goodModel, provider: "q" }] }, /provider "q" is not in providers/],
    ["negative price", { ...good, models: [{ ...goodModel, completionPricePer1M: -1 }] }, /completionPricePer1M must be a non-negative/],
    [
      "image tokens without high",
      { ...good, models: [{ ...goodModel, imageTokens: { low: 85 } }] },
      /models\[0\]\.imageTokens\.high must be a positive integer/,
    ],
    ["image tokens as a number", { ...good, models: [{ ...goodModel, imageTokens: 765 }] }, /models\[0\]\.imageTokens must be an object/],
    ["bad provider type", { ...good, providers: { p: { ...good.providers.p, type: "grpc" } } }, /providers\.p\.type/],
    ["fallbacks not a list", { ...good, models: [{ ...goodModel, fallbacks: "p/b" }] }, /models\[0\]\.fallbacks must be a list/],
    [
      "a fallback not in the catalog",
      { ...good, models: [{ ...goodModel, fallbacks: ["p/none"] }] },
      /models\[0\]\.fallbacks\[0\] "p\/none" is not a catalog model id/,
    ],
    [
      "a model its own fallback",
      { ...good, models: [{ ...goodModel, fallbacks: [goodModel.id] }] },
      /models\[0\]\.fallbacks\[0\] names the model itself/,
    ],
    [
      "a fallback twice",
      {
        ...good,
        models: [
          { ...goodModel, fallbacks: ["p/b", "p/b"] },
          { ...goodModel, id: "p/b" },
        ],
      },
      /models\[0\]\.fallbacks\[1\] "p\/b" appears twice/,
    ],
    ["aliases as a string", { ...good, models: [{ ...goodModel, aliases: "m" }] }, /models\[0\]\.aliases must be a list of strings/],
    ["an empty alias", { ...good, models: [{ ...goodModel, aliases: [""] }] }, /models\[0\]\.aliases\[0\] must be a non-empty string/],
    [
      "an alias that is a model's id",
      {
        ...good,
        models: [
          { ...goodModel, aliases: ["p/n"] },
          { ...goodModel, id: "p/n" },
        ],
      },
      /models\[0\]\.aliases\[0\] "p\/n" is already a model id or alias/,
    ],
    [
      "an alias two models give",
      {
        ...good,
        models: [
          { ...goodModel, aliases: ["m"] },
          { ...goodModel, id: "p/n", aliases: ["m"] },
        ],
      },
      /models\[1\]\.aliases\[0\] "m" is already a model id or alias/,
    ],
  ])("catalog: %s is refused under MODELS_FILE", (_name, content, expected) => {
    expect(() => loadConfig({ MODELS_FILE: catalogFile(content), P_KEY: "k" })).toThrow(expected as RegExp);
    try {
      loadConfig({ MODELS_FILE: catalogFile(content), P_KEY: "k" });
    } catch (e) {
      expect((e as ConfigError).variable).toBe("MODELS_FILE");
    }
  });

  test("a provider whose key variable is unset is skipped, with its models", () => {
    const c = loadConfig({ MODELS_FILE: catalogFile(good), LOG_LEVEL: "error" });
    expect(c.catalog.models.size).toBe(0);
    expect(JSON.parse(renderModels(c.catalog, () => true).list)).toEqual({ object: "list", data: [] });
  });

  test("aliases: each resolves to its model; a skipped model's alias is not served and says why", () => {
    const content = { ...good, models: [{ ...goodModel, aliases: ["m", "m-latest"] }] };
    const c = loadConfig({ MODELS_FILE: catalogFile(content), P_KEY: "k" });
    expect(findModel(c.catalog, "m")).toBe(c.catalog.models.get("p/m")!);
    expect(findModel(c.catalog, "m-latest")!.id).toBe("p/m");
    expect(findModel(c.catalog, "p/m")!.aliases).toEqual(["m", "m-latest"]);
    expect(findModel(c.catalog, "n")).toBeUndefined();
    const off = loadConfig({ MODELS_FILE: catalogFile(content), LOG_LEVEL: "error" });
    expect(findModel(off.catalog, "m")).toBeUndefined();
    expect(unknownModelReason(off.catalog, "m")).toBe(
      'Model "m" is in the catalog but its provider "p" is not configured (P_KEY is unset)',
    );
  });
});
