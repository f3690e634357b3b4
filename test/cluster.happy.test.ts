/**
 * The gateway on a real Redis Cluster (3 masters + 3 replicas of redis-server on loopback): chat JSON and stream,
 * keys, grants and top-ups, usage, the flusher, `admin audit` — exact statuses and balances, as on one Redis. A
 * cluster refuses any command whose keys span two slots (CROSSSLOT) and counts every such refusal per node; the
 * last test asserts that no node counted one while all of this ran.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Cluster } from "ioredis";
import { keySlot } from "../src/redis/slot.ts";
import { ClusterRouter } from "../src/redis/clusterRouter.ts";
import { checkEvictionPolicy } from "../src/rebuild/redisChecks.ts";
import { startChain, type DevChain } from "./helpers/chain.ts";
import { runMain } from "./helpers/child.ts";
import { startCluster, type TestCluster } from "./helpers/cluster.ts";
import { BASE, expectedCharge, startGateway, type TestGateway } from "./helpers/gateway.ts";
import { usageFor } from "./helpers/openaiStandin.ts";
import { v2Fetch } from "./helpers/x402.ts";

let cluster: TestCluster;
let chain: DevChain;
let gw: TestGateway;

/** errorstat_<PREFIX> counts of every live node, summed (INFO errorstats). */
async function errorCount(prefix: string): Promise<number> {
  let n = 0;
  for (const node of cluster.nodes) {
    const stats = await cluster.cli(node.port, "INFO", "errorstats");
    n += Number(new RegExp(`errorstat_${prefix}:count=(\\d+)`).exec(stats)?.[1] ?? 0);
  }
  return n;
}

beforeAll(async () => {
  [cluster, chain] = await Promise.all([startCluster(), startChain()]);
  // The assertion at the end must be able to fail: a command spanning two slots is counted.
  const [a, b] = ["{a}", "{b}"];
  expect(keySlot(a)).not.toBe(keySlot(b));
  const mset = Bun.spawn(["redis-cli", "-p", String(cluster.nodes[0]!.port), "MSET", a, "1", b, "1"], { stdout: "pipe", stderr: "pipe" });
  expect(await new Response(mset.stdout).text()).toContain("CROSSSLOT");
  expect(await errorCount("CROSSSLOT")).toBe(1);
  for (const node of cluster.nodes) await cluster.cli(node.port, "CONFIG", "RESETSTAT");
  gw = await startGateway(chain.gatewayEnv(), { cluster });
}, 90_000);

afterAll(async () => {
  await gw?.close();
  await Promise.all([cluster?.stop(), chain?.stop()]);
}, 30_000);

const messages = [{ role: "user" as const, content: "Say hello." }];
const usage = usageFor(messages.length);
const charge = expectedCharge(usage.prompt_tokens, usage.completion_tokens);

describe("Redis Cluster mode", () => {
  test("the 48 default shards spread 16/16/16 over the 3 masters; the gateway's slot function agrees with CLUSTER KEYSLOT", async () => {
    const keys = gw.services.ledger.names;
    const masters = await cluster.masters();
    const perMaster = new Map<string, number>();
    for (const shard of keys.allShards()) {
      const slot = Number(await cluster.cli(masters[0]!.port, "CLUSTER", "KEYSLOT", keys.wallet(shard, "0xabc")));
      expect(keySlot(keys.wallet(shard, "0xabc"))).toBe(slot);
      const owner = masters.find((m) => m.slots.some(([lo, hi]) => slot >= lo && slot <= hi))!;
      perMaster.set(owner.address, (perMaster.get(owner.address) ?? 0) + 1);
    }
    expect([...perMaster.values()]).toEqual([16, 16, 16]);
    // The hot path holds one connection per master, found from ioredis' slot map.
    const router = gw.services.scripts.client as ClusterRouter;
    expect(router.masters().sort()).toEqual(masters.map((m) => m.address).sort());
  });

  test("commands of one slot run in the order they were sent when the route changes between them: a command detoured through the Cluster client is not overtaken by the next one sent on the master's own connection", async () => {
    // A router of its own: its Bun connections to the masters are opened by the first command for each, so a first
    // command goes through ioredis' Cluster client (the route a failover or a stale map takes too).
    const commands = new Cluster(cluster.seeds.split(",").map((a) => ({ host: "127.0.0.1", port: Number(a.split(":")[1]) })));
    const router = new ClusterRouter(commands);
    try {
      await commands.ping();
      const list = "{order}:list";
      // The detoured command waits on the server behind a blocking command of the Cluster client's connection.
      const blocking = commands.blpop("{order}:never", 0.5);
      const first = router.send("RPUSH", [list, "first"], list);
      await router.onConnect(async () => {});
      // The master's own connection is up now: the next command of the slot would take it and run at once.
      const second = router.send("RPUSH", [list, "second"], list);
      await Promise.all([blocking, first, second]);
      expect(await commands.lrange(list, 0, -1)).toEqual(["first", "second"]);
      await commands.del(list);
    } finally {
      router.close();
      commands.disconnect();
    }
  });

  test("chat JSON and stream charge exactly; balance and usage agree with Postgres after the flush", async () => {
    const { account, wallet, key } = await gw.newWallet(10);
    const openai = gw.openai(key);
    const json = await openai.chat.completions.create({ model: "standin/echo", messages, max_tokens: 50 });
    expect(json.usage).toMatchObject({ prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens });
    const stream = await openai.chat.completions.create({ model: "standin/echo", messages, max_tokens: 50, stream: true });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
    expect(text.length).toBeGreaterThan(0);

    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - 2 * charge, locked: 0 });
    const q = new URLSearchParams(await gw.signIn(account));
    const report = await gw.call("GET", `/v1/usage/${account.address}?${q}`);
    expect(report.status).toBe(200);
    expect(report.body).toMatchObject({ balance_usdc: 10_000_000 - 2 * charge, locked_usdc: 0 });
    expect(report.body.keys[0]).toMatchObject({
      request_count: 2,
      total_charged_usdc: 2 * charge,
      total_prompt_tokens: 2 * usage.prompt_tokens,
    });

    await gw.services.flusher.drain();
    const [row] = await gw.services.sql<{ n: number; sum: number }[]>`
      SELECT COUNT(*)::int AS n, COALESCE(SUM(amount_usdc), 0)::int AS sum FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge'`;
    expect(row).toEqual({ n: 2, sum: 2 * charge });
  });

  test("keys: a second key is listed; revoked, its next request is 401 and the first key still works", async () => {
    const { account, key } = await gw.newWallet(5);
    const created = await gw.call("POST", "/v1/auth/keys", { ...(await gw.signIn(account)), label: "second" });
    expect(created.status).toBe(201);
    const list = await gw.call("GET", `/v1/auth/keys?${new URLSearchParams(await gw.signIn(account))}`);
    expect(list.status).toBe(200);
    expect(list.body.data.map((k: { label: string }) => k.label).sort()).toEqual(["second", "test"]);

    const revoked = await gw.call("DELETE", `/v1/auth/keys/${created.body.id}`, await gw.signIn(account));
    expect(revoked.status).toBe(200);
    expect(revoked.body).toEqual({ revoked: true });
    const refused = await gw.call(
      "POST",
      "/v1/chat/completions",
      { model: "standin/echo", messages },
      { authorization: `Bearer ${created.body.key}` },
    );
    expect(refused.status).toBe(401);
    expect(refused.body.error).toBe("UNAUTHORIZED");
    const ok = await gw.call(
      "POST",
      "/v1/chat/completions",
      { model: "standin/echo", messages, max_tokens: 50 },
      { authorization: `Bearer ${key}` },
    );
    expect(ok.status).toBe(200);
  });

  test("a SIWE message is accepted once for POST (the replay guard), and a key budget holds", async () => {
    const { account } = await gw.newWallet(5);
    const signed = await gw.signIn(account);
    const created = await gw.call("POST", "/v1/auth/keys", { ...signed, label: "once", budget_usdc: 1_000 });
    expect(created.status).toBe(201);
    const replay = await gw.call("POST", "/v1/auth/keys", { ...signed, label: "twice" });
    expect(replay.status).toBe(401);
    expect(replay.body.error).toBe("UNAUTHORIZED");

    const auth = { authorization: `Bearer ${created.body.key}` };
    let served = 0;
    let over;
    for (let i = 0; i < 20; i++) {
      over = await gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages, max_tokens: 50 }, auth);
      if (over.status !== 200) break;
      served++;
    }
    expect(served).toBeGreaterThan(0);
    expect(over!.status).toBe(402);
    expect(over!.body).toMatchObject({ error: "KEY_BUDGET_EXCEEDED", key_budget_left_usdc: 1_000 - served * charge });
  });

  test("grant through `admin grant` (a child process on REDIS_CLUSTER_NODES) and an x402 top-up credit exactly once", async () => {
    const { wallet } = await gw.newWallet(0);
    const granted = await runMain(
      ["admin", "grant", wallet, "2.5", "--reason", "cluster test", "--id", `cluster:${wallet}`],
      gw.sharedEnv(),
    );
    expect(granted.code).toBe(0);
    const again = await runMain(["admin", "grant", wallet, "2.5", "--reason", "cluster test", "--id", `cluster:${wallet}`], gw.sharedEnv());
    expect(again.code).toBe(0);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 2_500_000, locked: 0 });

    const payer = await chain.newPayer();
    const res = await v2Fetch(
      gw.fetch,
      chain,
      payer,
    )(`${BASE}/v1/topup`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ amount: 3 }),
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ balance_usdc: 3_000_000, credited_usdc: 3_000_000 });
    expect(await gw.ledgerState(payer.address.toLowerCase())).toEqual({ balance: 3_000_000, locked: 0 });
  });

  test("the flusher reads every shard's stream on its master: all outboxes empty, one row per charge", async () => {
    const { wallet, key } = await gw.newWallet(5);
    await Promise.all(
      Array.from({ length: 6 }, () => gw.openai(key).chat.completions.create({ model: "standin/echo", messages, max_tokens: 50 })),
    );
    await gw.services.flusher.drain();
    const keys = gw.services.ledger.names;
    const lengths = await Promise.all(keys.allShards().map((s) => gw.services.redis.xlen(keys.outbox(s))));
    expect(lengths.reduce((a, b) => a + b, 0)).toBe(0);
    const [row] = await gw.services.sql<
      { n: number }[]
    >`SELECT COUNT(*)::int AS n FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge'`;
    expect(row!.n).toBe(6);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 5_000_000 - 6 * charge, locked: 0 });
  });

  test("the sweeper finds an expired hold on its shard's master and releases it: nothing charged, nothing locked", async () => {
    const { wallet, keyId } = await gw.newWallet(1);
    const ledger = gw.services.ledger;
    const p = ledger.principal(keyId, wallet);
    const holdId = crypto.randomUUID();
    await ledger.reserve(p, holdId, 300_000);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 300_000 });
    // A crashed gateway's hold: its expiry has passed.
    expect(await gw.services.redis.zadd(ledger.names.holds(p.shard), "XX", "CH", 1, holdId)).toBe(1);
    expect(await ledger.sweepExpired()).toBe(1);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
  });

  test("start-up refuses a cluster with an evicting master, naming it", async () => {
    const [, second] = await cluster.masters();
    await cluster.cli(second!.port, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru");
    try {
      await expect(checkEvictionPolicy(gw.services.redis)).rejects.toThrow(
        `REDIS_CLUSTER_NODES: the cluster master 127.0.0.1:${second!.port} evicts keys (maxmemory-policy allkeys-lru); the ledger needs maxmemory-policy noeviction`,
      );
    } finally {
      await cluster.cli(second!.port, "CONFIG", "SET", "maxmemory-policy", "noeviction");
    }
    await checkEvictionPolicy(gw.services.redis);
  });

  test("`admin audit` (a child process on the cluster) finds Redis and Postgres in agreement", async () => {
    await gw.services.flusher.drain();
    const r = await runMain(["admin", "audit"], gw.sharedEnv());
    expect(r.stdout).toContain("audit: the books agree");
    expect(r.code).toBe(0);
  }, 30_000);

  test("no command the gateway sent spanned two slots: no node refused one as CROSSSLOT", async () => {
    expect(await errorCount("CROSSSLOT")).toBe(0);
  });
});
