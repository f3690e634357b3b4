/**
 * Losing a node of a real Redis Cluster while the gateway runs, without restarting the gateway:
 * - a master killed with kill -9 whose replica is promoted: the gateway serves its wallets again within 10 s;
 * - a master killed right after it acknowledged a charge its replica never received: the gateway posts the charge
 *   again on the promoted replica (Redis replicates asynchronously), so no served request goes uncharged;
 * - masters killed one after another under chat load (JSON and streams, on two gateways, with keys no gateway has
 *   cached yet): every answer is 200/402/429/503/504, never a 500; both serve again within 10 s of each promotion;
 *   each wallet is charged exactly what its answers reported, no credit stays locked, and `admin audit` is clean;
 * - a master that comes back empty (it and its replica lost their data): the next request finds its shards' fences
 *   gone, the ledger is rebuilt from Postgres under the fence, and `admin audit` finds Redis and Postgres in agreement.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { runAudit } from "../src/audit/audit.ts";
import { type ChildGateway, runMain, startChildGateway } from "./helpers/child.ts";
import { accountOn, startCluster, type TestCluster } from "./helpers/cluster.ts";
import { type Answer, ChatLoad, FAILOVER_STATUSES, failoverRound, type FailoverRound, type Gateway } from "./helpers/failoverLoad.ts";
import { BASE, expectedCharge, startGateway, type TestGateway } from "./helpers/gateway.ts";
import { captureErrors } from "./helpers/logs.ts";
import { usageFor } from "./helpers/openaiStandin.ts";
import type { PrivateKeyAccount } from "viem/accounts";

let cluster: TestCluster;
let gw: TestGateway;
// The second gateway of the load test, started there: a process of its own would repair the emptied master's
// ledger behind the other test's back.
let child: ChildGateway | undefined;
// Failover rounds in the load test: the 500s it guards against came 1 or 2 in a dozen requests.
const ROUNDS = 4;
const FRESH_KEYS = 8;

beforeAll(async () => {
  // 2 s without an answer marks a master failed: a busy test machine does not fail one over by mistake.
  cluster = await startCluster({ nodeTimeoutMs: 2_000 });
  // No rate limit in reach: the load's answers are the ledger's, not 429s.
  gw = await startGateway({ RATE_LIMIT_REQUESTS: "1000000" }, { cluster });
}, 60_000);

afterAll(async () => {
  if (child && child.proc.exitCode === null) await child.stop();
  await gw?.close();
  await cluster?.stop();
}, 30_000);
const errors = captureErrors(/"Redis lost the outbox consumer groups/);

const messages = [{ role: "user" as const, content: "Say hello." }];
const usage = usageFor(messages.length);
const charge = expectedCharge(usage.prompt_tokens, usage.completion_tokens);
const chat = (key: string) =>
  gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages, max_tokens: 50 }, { authorization: `Bearer ${key}` });
const shardOf = (w: string) => gw.services.ledger.names.wallet(gw.services.ledger.names.shardOf(w), w);

/**
 * Waits (bounded) until no hold of `wallet` is open: settles and releases run behind their answers, on two gateways.
 * A release behind a reserve whose reply was lost waits for that reserve's outcome for up to 30 s (Holds), so the
 * bound is above that: first the in-process gateway's own settles and releases, then the child's, polled.
 */
async function settled(wallet: string): Promise<void> {
  await gw.services.chat.idle();
  const deadline = Date.now() + 60_000;
  while ((await gw.ledgerState(wallet)).locked !== 0 && Date.now() < deadline) await Bun.sleep(20);
}

/** Polls `check` every 10 ms until it holds; fails the test after 5 s. */
async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`not within 5 s: ${what}`);
    await Bun.sleep(10);
  }
}

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
    await cluster.replicated(victim!.port);

    await cluster.kill(victim!.port);
    // The node comes back whatever this test finds, so the tests after it start on a whole cluster.
    try {
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
      // Served through the promoted replica; the view of the node asked may lag a gossip round behind.
      const seenBy = Date.now() + 5_000;
      while (!(await cluster.masters()).some((m) => m.port === replica) && Date.now() < seenBy) await Bun.sleep(50);
      expect((await cluster.masters()).map((m) => m.port)).toContain(replica);

      // The first answer's settle may have met the dying master's connection: it is retried behind the answer.
      await settled(wallet);
      expect(await gw.ledgerState(wallet)).toEqual({ balance: 5_000_000 - 2 * charge, locked: 0 });
      await auditClean();
    } finally {
      // The killed node comes back (empty) and rejoins as the new master's replica: the cluster is whole again.
      await cluster.restart(victim!.port);
      await cluster.waitHealthy();
    }
  }, 30_000);

  test("a charge the killed master acknowledged but never replicated: posted again on the promoted replica, so the books stay exact", async () => {
    const [victim] = await cluster.masters();
    const { wallet, key } = await gw.newWallet(5, {}, await accountOn(cluster, victim!.port, shardOf));
    const slow = gw.call(
      "POST",
      "/v1/chat/completions",
      { model: "standin/slow", messages, max_tokens: 50 },
      { authorization: `Bearer ${key}` },
    );
    // The hold is on the replica too; then the replica stops receiving, and the settle lands on the master alone.
    await until("the slow request's hold", async () => (await gw.ledgerState(wallet)).locked !== 0);
    await cluster.replicated(victim!.port);
    const replica = await cluster.stall(victim!.port);
    let killed = false;
    try {
      expect((await slow).status).toBe(200);
      await until("the slow request's settle on the master", async () => (await gw.ledgerState(wallet)).locked === 0);
      expect(await gw.ledgerState(wallet)).toEqual({ balance: 5_000_000 - charge, locked: 0 });
      await cluster.kill(victim!.port);
      killed = true;
    } finally {
      cluster.resume(replica);
    }
    try {
      // The replica takes over with the hold open and without the charge; the gateway posts the charge again.
      const killedAt = Date.now();
      let status = 0;
      while (status !== 200 && Date.now() - killedAt < 10_000) {
        status = (await chat(key)).status;
        if (status !== 200) await Bun.sleep(100);
      }
      expect(status).toBe(200);
      await settled(wallet);
      expect(await gw.ledgerState(wallet)).toEqual({ balance: 5_000_000 - 2 * charge, locked: 0 });
      await auditClean();
    } finally {
      if (killed) {
        await cluster.restart(victim!.port);
        await cluster.waitHealthy();
      }
    }
  }, 90_000);

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
    // The flusher tells the operator the data was lost (its consumer groups went with it), once it looks.
    await gw.services.flusher.drain();
    expect(errors.take(/"Redis lost the outbox consumer groups/).length).toBeGreaterThan(0);
  }, 60_000);

  test("masters killed one after another under chat load (JSON and streams, two gateways): only 200/402/429/503/504, served again within 10 s of each promotion, every charge reported is the one taken", async () => {
    const second = (child = await startChildGateway(gw.sharedEnv()));
    const gateways: Gateway[] = [
      { name: "in-process", fetch: (path, init) => gw.handle(new Request(BASE + path, init)) },
      { name: "child", fetch: (path, init) => fetch(second.url + path, init) },
    ];
    const wallets: { wallet: string; key: string }[] = [];
    const answers: Answer[] = [];
    const rounds: FailoverRound[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const masters = await cluster.masters();
      const victim = masters[round % 3]!.port;
      const onVictim = await gw.newWallet(5, {}, await accountOn(cluster, victim, shardOf));
      const onOther = await gw.newWallet(5, {}, await accountOn(cluster, masters[(round + 1) % 3]!.port, shardOf));
      wallets.push(onVictim, onOther);
      // Keys no gateway has resolved yet, sent while the master is down: each is looked up in Redis first.
      const fresh = async (w: { account: PrivateKeyAccount }) =>
        Promise.all(Array.from({ length: FRESH_KEYS }, () => gw.newWallet(0, {}, w.account).then((k) => k.key)));
      const [victimKeys, otherKeys] = await Promise.all([fresh(onVictim), fresh(onOther)]);
      // The grants and keys are on the victim's replica before the load starts: what a failover may lose is the
      // load's own writes (docs/operating.md "Scaling out", Redis Cluster), not the round's set-up, without which the wallet is refused.
      await cluster.replicated(victim);
      const load = new ChatLoad(
        gateways,
        [
          { ...onVictim, fresh: victimKeys },
          { ...onOther, fresh: otherKeys },
        ],
        (u) => expectedCharge(u.prompt_tokens, u.completion_tokens),
      );
      try {
        rounds.push(await failoverRound(cluster, load, gateways, victim, onVictim.wallet, 10_000));
      } finally {
        await load.stop();
        answers.push(...load.answers);
      }
      await cluster.restart(victim);
      await cluster.waitHealthy();
    }

    const odd = answers.filter((a) => !FAILOVER_STATUSES.has(a.status) || a.odd !== undefined);
    if (odd.length > 0) console.error("answers outside the allowed set:", odd);
    const tally: Record<string, number> = {};
    for (const a of answers) tally[a.status] = (tally[a.status] ?? 0) + 1;
    console.log(
      "failover rounds:",
      rounds.map((r) => ({ promotedAfterMs: r.promotedAt - r.killedAt, servedAfterMs: r.servedAfterMs })),
      "statuses:",
      tally,
    );
    expect(odd).toEqual([]);
    for (const r of rounds) for (const ms of Object.values(r.servedAfterMs)) expect(ms).toBeLessThan(10_000);

    // A wallet's books that disagree are explained by the gateways' warnings: the child's are shown here (the
    // in-process gateway's go to the test's output).
    let shown = false;
    const explain = () => {
      if (!shown) console.error("child gateway's warnings and errors (last 64 kB):\n" + second.problems());
      shown = true;
    };
    // Money: each wallet's books are its grant less exactly the charges its answers reported, nothing held (a
    // charge the killed master acknowledged but did not pass on is posted again on the new owner); except a charge
    // whose hold the promoted replica never received (its reserve ran on the killed master just before the kill:
    // Redis replicates asynchronously), which settle keeps in pending_settles, marked for an operator (docs/operating.md
    // "Scaling out", Redis Cluster), never dropped: so each reported charge is in Redis or kept there.
    for (const w of wallets) {
      const reported = answers.filter((a) => a.wallet === w.wallet).reduce((sum, a) => sum + a.charge, 0);
      await settled(w.wallet);
      const [kept] = await gw.services.sql<{ sum: string }[]>`
        SELECT COALESCE(sum(charge_usdc), 0)::text AS sum FROM pending_settles WHERE wallet = ${w.wallet} AND unresolved`;
      if (Number(kept!.sum) > 0) console.log(`${w.wallet}: ${kept!.sum} µUSDC of charges kept for an operator (holds lost in a failover)`);
      const books = { wallet: w.wallet, ...(await gw.ledgerState(w.wallet)) };
      const expected = { wallet: w.wallet, balance: 5_000_000 - reported + Number(kept!.sum), locked: 0 };
      if (!Bun.deepEquals(books, expected)) {
        explain();
        console.error(`${w.wallet}: pending_settles`, await gw.services.sql`SELECT * FROM pending_settles WHERE wallet = ${w.wallet}`);
      }
      expect(books).toEqual(expected);
    }
    const audit = await runMain(["admin", "audit"], gw.sharedEnv());
    expect(audit.stdout).toContain("audit: the books agree");
    expect(audit.code).toBe(0);
  }, 240_000);
});
