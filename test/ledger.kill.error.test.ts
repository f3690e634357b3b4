/**
 * kill -9 right after an answer leaves loses no charge: the ledger tells the answer it may leave (`sent`) only once
 * the settle's bytes are in the kernel's socket buffer. Bun's Redis client queues a command and writes it after the
 * microtask queue drains (auto-pipelining), so a `sent` called as the command is queued let an answer out ahead of
 * its charge (test/serve.background.error's kill -9 under load lost one in a few runs). A process that kills itself
 * inside `sent`: Redis must hold the charge. Real redis-server; the ledger driven directly.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { Redis } from "ioredis";
import { join } from "node:path";
import { keyStateFields } from "../src/ledger/apiKeyState.ts";
import { RedisNames } from "../src/ledger/names.ts";
import { privateRedis } from "./helpers/services.ts";

const names = new RedisNames(48);
let server: Awaited<ReturnType<typeof privateRedis>>;
let redis: Redis;

beforeAll(async () => {
  server = await privateRedis();
  redis = new Redis(server.socket);
  for (const s of names.allShards()) await redis.set(names.fence(s), "1");
});
afterAll(async () => {
  redis?.disconnect();
  await server?.stop();
});

test("a process killed with -9 the moment its settle is said to be sent: the charge is in Redis and its outbox", async () => {
  for (let i = 0; i < 5; i++) {
    const wallet = `0x${"ab".repeat(19)}${i.toString(16).padStart(2, "0")}`;
    const walletName = names.wallet(names.shardOf(wallet), wallet);
    const keyName = names.apiKey(names.shardOf(wallet), 1);
    await redis.hset(walletName, { balance: 10_000, locked: 0 });
    await redis.hset(keyName, keyStateFields({ revoked: false, budget: null }));
    const holdId = `kill-${i}`;
    const child = Bun.spawn(
      [process.execPath, join(import.meta.dir, "helpers", "settleThenDie.ts"), server.socket, wallet, holdId, "1000", "250"],
      {
        stdout: "inherit",
        stderr: "inherit",
      },
    );
    expect(await child.exited).not.toBe(0);
    expect(child.signalCode).toBe("SIGKILL");
    // The charge: off the balance, out of the lock, and its event in the shard's outbox.
    expect(await redis.hmget(walletName, "balance", "locked")).toEqual(["9750", "0"]);
    const entries = await redis.xrange(names.outbox(names.shardOf(wallet)), "-", "+");
    expect(entries.flatMap(([, fields]) => fields).some((f) => f.includes(`"hold":"${holdId}"`))).toBe(true);
  }
}, 60_000);
