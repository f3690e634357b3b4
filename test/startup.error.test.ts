/**
 * Start-up refusals of a Redis the ledger cannot trust: one that may evict keys, and one whose ledger was built
 * with another LEDGER_SHARDS. The real entry point runs as a child process and must exit non-zero with one line.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { RedisNames } from "../src/ledger/names.ts";
import { checkRedisForLedger } from "../src/rebuild/redisChecks.ts";
import { freePort, runMain } from "./helpers/child.ts";
import { freshDatabase, privateRedis } from "./helpers/services.ts";

let server: Awaited<ReturnType<typeof privateRedis>>;
let redis: Redis;
let env: Record<string, string>;
let db: Awaited<ReturnType<typeof freshDatabase>> | undefined;

beforeAll(async () => {
  const port = freePort();
  server = await privateRedis({ port });
  redis = new Redis(server.socket);
  const dir = mkdtempSync(join(tmpdir(), "gw-startup-"));
  const models = join(dir, "models.json");
  writeFileSync(
    models,
    JSON.stringify({
      providers: { p: { type: "openai", baseUrl: "http://127.0.0.1:9/v1", apiKeyEnv: "P_KEY" } },
      models: [
        {
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
        },
      ],
    }),
  );
  // A port of its own (0: any free one): the default 8080 may be another run's, and the port is checked first.
  env = {
    REDIS_URL: `redis://127.0.0.1:${port}`,
    MODELS_FILE: models,
    P_KEY: "k",
    LOG_LEVEL: "error",
    DATA_DIR: dir,
    HOST: "127.0.0.1",
    PORT: "0",
  };
  // The machine's Postgres when there is one; else the child starts an embedded one in DATA_DIR.
  if (process.env.TEST_DATABASE_URL) {
    db = await freshDatabase();
    env.DATABASE_URL = db.database.url;
  }
});
afterAll(async () => {
  redis?.disconnect();
  await server?.stop();
  await db?.stop();
});

describe("REDIS_CLUSTER_NODES that name no healthy Redis Cluster refuse the start in one line", () => {
  test("a Redis without cluster mode", async () => {
    const { REDIS_URL, ...rest } = env;
    const r = await runMain(["serve"], { ...rest, REDIS_CLUSTER_NODES: REDIS_URL!.replace("redis://", "") });
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split("\n")).toEqual([
      `${REDIS_URL!.replace("redis://", "")} is a Redis without cluster mode; use REDIS_URL for it, or point REDIS_CLUSTER_NODES at a Redis Cluster`,
    ]);
  }, 30_000);

  test("seeds nobody answers on", async () => {
    const { REDIS_URL: _, ...rest } = env;
    const [a, b] = [freePort(), freePort()];
    const r = await runMain(["serve"], { ...rest, REDIS_CLUSTER_NODES: `127.0.0.1:${a},127.0.0.1:${b}` });
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split("\n")).toEqual([
      `no node of REDIS_CLUSTER_NODES serves a healthy Redis Cluster (127.0.0.1:${a}: ECONNREFUSED; 127.0.0.1:${b}: ECONNREFUSED); check the seeds and CLUSTER INFO`,
    ]);
  }, 30_000);
});

describe("a Redis the ledger cannot trust refuses the start", () => {
  test("the embedded redis-server never evicts keys", async () => {
    expect(await redis.config("GET", "maxmemory-policy")).toEqual(["maxmemory-policy", "noeviction"]);
  });

  test("maxmemory-policy that can evict keys: exit 1 with one configuration line, nothing written", async () => {
    await redis.config("SET", "maxmemory-policy", "allkeys-lru");
    try {
      const r = await runMain(["serve"], env);
      expect(r.code).toBe(1);
      expect(r.stderr.trim().split("\n")).toEqual([
        "configuration error: REDIS_URL: this Redis evicts keys (maxmemory-policy allkeys-lru); the ledger needs maxmemory-policy noeviction",
      ]);
      expect(await redis.dbsize()).toBe(0);
      if (db) {
        const admin = await runMain(["admin", "referrals"], env);
        expect(admin.code).toBe(1);
        // The first line says which ledger the command opened (issue 34.5); the refusal follows it, alone.
        expect(admin.stderr.trim().split("\n")).toEqual([
          expect.stringMatching(/^ledger: Redis at 127\.0\.0\.1:\d+, Postgres at /),
          "configuration error: REDIS_URL: this Redis evicts keys (maxmemory-policy allkeys-lru); the ledger needs maxmemory-policy noeviction",
        ]);
      }
    } finally {
      await redis.config("SET", "maxmemory-policy", "noeviction");
    }
  }, 30_000);

  test("the shard count is recorded at first start; another LEDGER_SHARDS exits 1 naming both values", async () => {
    await checkRedisForLedger(redis, new RedisNames(16)); // what the first start does
    expect(await redis.get("gw:ledger:shards")).toBe("16");
    await checkRedisForLedger(redis, new RedisNames(16)); // the same value starts again

    const r = await runMain(["serve"], { ...env, LEDGER_SHARDS: "8" });
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split("\n")).toEqual([
      "configuration error: LEDGER_SHARDS: is 8, but the ledger in this Redis was built with 16 shards (a change would move every wallet); set LEDGER_SHARDS=16",
    ]);
    expect(await redis.get("gw:ledger:shards")).toBe("16");

    // A ledger of an earlier version (16 shards, the old default) is not moved by the new default of 48.
    const upgraded = await runMain(["serve"], env);
    expect(upgraded.code).toBe(1);
    expect(upgraded.stderr.trim().split("\n")).toEqual([
      "configuration error: LEDGER_SHARDS: is 48, but the ledger in this Redis was built with 16 shards (a change would move every wallet); set LEDGER_SHARDS=16",
    ]);
    expect(await redis.get("gw:ledger:shards")).toBe("16");
  }, 30_000);
});
