/**
 * Losing a node of a real Redis Cluster while the gateway runs, without restarting the gateway:
 * - a master killed with kill -9 whose replica is promoted: the gateway serves its wallets again within 10 s;
 * - a master that comes back empty (it and its replica lost their data): the next request finds its shards' fences
 *   gone, the ledger is rebuilt from Postgres under the fence, and `admin audit` finds Redis and Postgres in agreement.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { runAudit } from "../src/audit/audit.ts";
import { accountOn, startCluster, type TestCluster } from "./helpers/cluster.ts";
import { expectedCharge, startGateway, type TestGateway } from "./helpers/gateway.ts";
import { usageFor } from "./helpers/openaiStandin.ts";

let cluster: TestCluster;
let gw: TestGateway;

beforeAll(async () => {
  // 2 s without an answer marks a master failed: a busy test machine does not fail one over by mistake.
  cluster = await startCluster({ nodeTimeoutMs: 2_000 });
  gw = await startGateway({}, { cluster });
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await cluster?.stop();
}, 30_000);

const messages = [{ role: "user" as const, content: "Say hello." }];
const usage = usageFor(messages.length);
const charge = expectedCharge(usage.prompt_tokens, usage.completion_tokens);
const chat = (key: string) => gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages, max_tokens: 50 }, { authorization: `Bearer ${key}` });
const shardOf = (w: string) => gw.services.ledger.names.wallet(gw.services.ledger.names.shardOf(w), w);

async function auditClean(): Promise<void> {
  await gw.services.flusher.drain();
  const audit = await runAudit(gw.services, { fix: false });
  expect(audit.output.split("\n")[0]).toBe("audit: the books agree (Redis = Postgres + outbox)");
  expect(audit.clean).toBe(true);
}

describe("a Redis Cluster losing a node", () => {
  test("a master killed with kill -9: its replica takes over and the gateway serves its wallets again within 10 s, without a restart", async () => {
    const [victim] = await cluster.masters();
    const replica = await cluster.replicaOf(victim!.port);
    const { wallet, key } = await gw.newWallet(5, {}, await accountOn(cluster, victim!.port, shardOf));
    expect((await chat(key)).status).toBe(200);
    await gw.services.flusher.drain();

    await cluster.kill(victim!.port);
    const killedAt = Date.now();
    const refused: number[] = [];
    let served = false;
    while (!served && Date.now() - killedAt < 10_000) {
      const res = await chat(key);
      if (res.status === 200) served = true;
      else {
        // While the master is gone: 503, nothing held or charged.
        expect(res.body.error).toBe("SERVICE_UNAVAILABLE");
        refused.push(res.status);
        await Bun.sleep(100);
      }
    }
    expect(served).toBe(true);
    const tookMs = Date.now() - killedAt;
    expect(tookMs).toBeLessThan(10_000);
    expect(new Set(refused)).toEqual(new Set(refused.length > 0 ? [503] : []));
    expect((await cluster.masters()).map((m) => m.port)).toContain(replica);

    expect(await gw.ledgerState(wallet)).toEqual({ balance: 5_000_000 - 2 * charge, locked: 0 });
    await auditClean();

    // The killed node comes back (empty) and rejoins as the new master's replica: the cluster is whole again.
    await cluster.restart(victim!.port);
    await cluster.waitHealthy();
  }, 30_000);

  test("a master that comes back empty: its shards are rebuilt from Postgres under the fence, and the books agree", async () => {
    const masters = await cluster.masters();
    const emptied = masters[1]!;
    const other = masters[2]!;
    const lost = await gw.newWallet(5, {}, await accountOn(cluster, emptied.port, shardOf));
    const kept = await gw.newWallet(5, {}, await accountOn(cluster, other.port, shardOf));
    for (const w of [lost, kept]) for (let i = 0; i < 2; i++) expect((await chat(w.key)).status).toBe(200);
    await gw.services.flusher.drain();
    const epochBefore = gw.services.ledger.fence.epoch(gw.services.ledger.names.shardOf(kept.wallet));

    // Its replica first, so nothing takes over: the master returns as the owner of its slots, with no data.
    const replica = await cluster.replicaOf(emptied.port);
    await cluster.kill(replica);
    await cluster.kill(emptied.port);
    await cluster.restart(emptied.port);
    await cluster.restart(replica);
    await cluster.waitHealthy();
    expect(Number(await cluster.cli(emptied.port, "DBSIZE"))).toBe(0);

    // The next request on a lost shard finds no fence: rebuilt, then served and charged on top of Postgres's books.
    expect((await chat(lost.key)).status).toBe(200);
    expect(await gw.ledgerState(lost.wallet)).toEqual({ balance: 5_000_000 - 3 * charge, locked: 0 });
    expect((await chat(kept.key)).status).toBe(200);
    expect(await gw.ledgerState(kept.wallet)).toEqual({ balance: 5_000_000 - 3 * charge, locked: 0 });

    // Every shard, on every master, is open under the one new epoch.
    const k = gw.services.ledger.names;
    const fences = new Set(await Promise.all(k.allShards().map((s) => gw.services.redis.get(k.fence(s)))));
    expect(fences.size).toBe(1);
    const [epoch] = [...fences];
    expect(epoch).toMatch(/^\d+$/);
    expect(Number(epoch)).toBeGreaterThan(Number(epochBefore));
    await auditClean();
  }, 60_000);
});
