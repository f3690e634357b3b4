/**
 * On a single Redis one script call carries every shard's waiting reserves (and settles): a load spread over many
 * wallets batches as one wallet's does (issue 31). Each shard keeps its own fence, holds index and outbox; a fence
 * that moved on one shard refuses the whole call, which goes again once that shard's epoch is adopted. Real
 * redis-server; the ledger driven directly.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { Redis } from "ioredis";
import { keyStateFields } from "../src/ledger/apiKeyState.ts";
import { Ledger } from "../src/ledger/ledger.ts";
import { RedisNames } from "../src/ledger/names.ts";
import { LedgerScripts } from "../src/ledger/scripts.ts";
import { privateRedis } from "./helpers/services.ts";

const names = new RedisNames(48);
let server: Awaited<ReturnType<typeof privateRedis>>;
let redis: Redis;
let scripts: LedgerScripts;
let ledger: Ledger;

beforeAll(async () => {
  server = await privateRedis();
  redis = new Redis(server.socket);
  scripts = await LedgerScripts.connect(server.socket);
  ledger = new Ledger(redis, scripts, names, { rateLimitRequests: 1_000, rateLimitWindowMs: 60_000, holdTtlMs: 60_000 });
  for (const s of names.allShards()) await redis.set(names.fence(s), "1");
  await ledger.fence.readAll();
});
afterAll(async () => {
  redis?.disconnect();
  scripts?.close();
  await server?.stop();
});

/** Wallets whose last 4 hex digits put each on a shard of its own (shardOf: modulo the shard count). */
async function wallets(n: number, from: number) {
  const ps = [];
  for (let i = 0; i < n; i++) {
    const wallet = `0x${"cd".repeat(18)}${(from + i).toString(16).padStart(4, "0")}`;
    const p = ledger.principal(from + i, wallet);
    await redis.hset(p.walletName, { balance: 10_000, locked: 0 });
    await redis.hset(p.apiKeyName, keyStateFields({ revoked: false, budget: null }));
    ps.push(p);
  }
  expect(new Set(ps.map((p) => p.shard)).size).toBe(n);
  return ps;
}

async function scriptCalls(): Promise<number> {
  return Number(/cmdstat_evalsha:calls=(\d+)/.exec(await redis.info("commandstats"))?.[1] ?? 0);
}

const details = { promptTokens: 10, completionTokens: 5, costMicro: 40, model: "m/x" };

test("reserves and settles of wallets on 4 shards go as 2 calls each (the first alone, the rest together), per shard exact", async () => {
  const ps = await wallets(4, 1);
  const before = await scriptCalls();
  const held = await Promise.all(ps.map((p, i) => ledger.reserve(p, `r${i}`, 1_000 * (i + 1))));
  expect(held.map((r) => r.ok && r.available)).toEqual([9_000, 8_000, 7_000, 6_000]);
  expect(await scriptCalls()).toBe(before + 2);
  const charged = await Promise.all(ps.map((p, i) => ledger.settle(p, `r${i}`, 100 * (i + 1), details)));
  expect(charged).toEqual([true, true, true, true]);
  expect(await scriptCalls()).toBe(before + 4);
  for (const [i, p] of ps.entries()) {
    expect(await redis.hgetall(p.walletName)).toEqual({ balance: String(10_000 - 100 * (i + 1)), locked: "0" });
    expect(await redis.zcard(names.holds(p.shard))).toBe(0);
    const outbox = await redis.xrange(names.outbox(p.shard), "-", "+");
    const events = outbox.flatMap(([, f]) => JSON.parse(`[${f[1]!}]`) as { hold: string; amount: number }[]);
    expect(events.map((e) => [e.hold, e.amount])).toEqual([[`r${i}`, 100 * (i + 1)]]);
  }
  // A repeat of every settle, again in one call: nothing is charged twice.
  expect(await Promise.all(ps.map((p, i) => ledger.settleOutcome(p, `r${i}`, 100, details)))).toEqual(Array(4).fill("settled"));
});

test("a fence moved on one shard refuses the whole call; it goes again under the adopted epoch and holds each once", async () => {
  const ps = await wallets(3, 100);
  await redis.set(names.fence(ps[2]!.shard), "2");
  const before = await scriptCalls();
  const held = await Promise.all(ps.map((p, i) => ledger.reserve(p, `f${i}`, 500)));
  expect(held.map((r) => r.ok && r.available)).toEqual([9_500, 9_500, 9_500]);
  // p0 alone; p1 and p2 together, refused for p2's shard, then again.
  expect(await scriptCalls()).toBe(before + 3);
  expect(ledger.fence.epoch(ps[2]!.shard)).toBe("2");
  for (const p of ps) expect(await redis.hget(p.walletName, "locked")).toBe("500");
  // The refused call changed nothing on the shard that was open: p1 has one hold.
  expect(await redis.zrange(names.holds(ps[1]!.shard), "0", "-1")).toEqual(["f1"]);
  for (const [i, p] of ps.entries()) expect(await ledger.release(p, `f${i}`)).toBe(true);
});

test("leased settles of wallets on 4 shards go as 2 calls too, each lease giving up its own, per shard exact", async () => {
  const ps = await wallets(4, 101);
  const ask = { target: 3_000, floor: 0, sharePerMille: 1000, least: 0, slots: 0, slotsBack: 0, slotsWindow: 0, ttlMs: 60_000 };
  for (const [i, p] of ps.entries()) expect((await ledger.lease(p, { ...ask, leaseId: `L${i}` })).ok).toBe(true);
  const before = await scriptCalls();
  const lease = (i: number) => ({ id: `L${i}`, held: 1_000 });
  const charged = await Promise.all(ps.map((p, i) => ledger.settleLeased(p, `c${i}`, 100 * (i + 1), details, lease(i))));
  expect(charged).toEqual(ps.map((_, i) => ({ outcome: "charged", covered: 100 * (i + 1) })));
  expect(await scriptCalls()).toBe(before + 2);
  for (const [i, p] of ps.entries()) {
    expect(await redis.hgetall(p.walletName)).toEqual({ balance: String(10_000 - 100 * (i + 1)), locked: String(3_000 - 100 * (i + 1)) });
    expect(await redis.get(names.holdMarker(p.shard, `L${i}`))).toBe(`live|${3_000 - 100 * (i + 1)}|${p.wallet}|${p.keyId}`);
    const outbox = await redis.xrange(names.outbox(p.shard), "-", "+");
    const events = outbox.flatMap(([, f]) => JSON.parse(`[${f[1]!}]`) as { type: string; hold: string; amount: number }[]);
    expect(events.filter((e) => e.type === "charge").map((e) => [e.hold, e.amount])).toEqual([[`c${i}`, 100 * (i + 1)]]);
  }
  // A repeat of every charge, again in one call: nothing is charged twice.
  const again = await Promise.all(ps.map((p, i) => ledger.settleLeased(p, `c${i}`, 100, details, lease(i))));
  expect(again).toEqual(Array(4).fill({ outcome: "settled", covered: 0 }));
  expect(await scriptCalls()).toBe(before + 4);
});
