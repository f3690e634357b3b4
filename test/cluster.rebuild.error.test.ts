/**
 * A ledger rebuild on a real Redis Cluster whose master fails over while it runs: Redis replicates asynchronously,
 * so a replica promoted after the rebuild wrote a shard may hold the shard's closed fence without the writes that
 * followed it. The rebuild must not open such a shard: opened, it would serve wallets that are not there (a credit
 * re-applied by the repair job then makes a balance of the credits alone, with no charges and no API keys).
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { runAudit } from "../src/audit/audit.ts";
import { RebuildLockLost } from "../src/rebuild/lock.ts";
import { rebuildLedger } from "../src/rebuild/rebuild.ts";
import { accountOn, startCluster, type TestCluster } from "./helpers/cluster.ts";
import { expectedCharge, startGateway, type TestGateway } from "./helpers/gateway.ts";
import { captureErrors } from "./helpers/logs.ts";
import { usageFor } from "./helpers/openaiStandin.ts";

let cluster: TestCluster;
let gw: TestGateway;

beforeAll(async () => {
  cluster = await startCluster({ nodeTimeoutMs: 1_000 });
  gw = await startGateway({}, { cluster });
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await cluster?.stop();
}, 30_000);
// Expected here: the emptied master's flusher groups are gone; and the charges the master acknowledged last,
// before it lost its data, are posted again at its failover (RecentCharges) and kept for an operator, their holds
// gone with the data (the charges themselves are in Postgres).
captureErrors(/"Redis lost the outbox consumer groups/, /deferred settle: Redis no longer knows the hold/);

/** The name of a wallet's hash: the account chosen by it lives on the master that owns its slot. */
const walletHash = (w: string) => gw.services.ledger.names.wallet(gw.services.ledger.names.shardOf(w), w);
const hello = [{ role: "user" as const, content: "Say hello." }];
/** One answered request, charged at the test catalog's prices. */
const served = async (key: string) => (await gw.openai(key).chat.completions.create({ model: "standin/echo", messages: hello })).usage;
const echoed = usageFor(hello.length);
const charge = expectedCharge(echoed.prompt_tokens, echoed.completion_tokens);

/** Polls `check` every 50 ms until it holds; fails the test after 20 s. */
async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`not within 20 s: ${what}`);
    await Bun.sleep(50);
  }
}

test("a master failing over between a rebuild's writes and the opening of its fences: its shards stay closed and are rebuilt again, so no wallet is served without its charges and keys", async () => {
  const [master] = await cluster.masters();
  const { wallet, key } = await gw.newWallet(5, {}, await accountOn(cluster, master!.port, walletHash));
  for (let i = 0; i < 2; i++) expect(await served(key)).toMatchObject(echoed);
  await gw.services.flusher.drain();

  // The master and its replica lose their data: the ledger of its shards is in Postgres only.
  const replica = await cluster.replicaOf(master!.port);
  await cluster.kill(replica);
  await cluster.kill(master!.port);
  await cluster.restart(master!.port);
  await cluster.restart(replica);
  await cluster.waitHealthy();

  const { ledger, sql } = gw.services;
  const k = ledger.names;
  const shard = k.shardOf(wallet);
  let promoted = 0;
  const rebuilt = rebuildLedger(ledger, sql, {
    hooks: {
      // The replica holds the closed fences, then takes in nothing more: the rebuild's writes reach the master only.
      fenced: () => cluster.replicated(master!.port),
      snapshotTaken: async () => {
        promoted = await cluster.stall(master!.port);
      },
      // The master dies with those writes; its replica takes over before any fence opens.
      written: async () => {
        await cluster.kill(master!.port);
        cluster.resume(promoted);
        await until("the replica is promoted", async () => (await cluster.masters()).some((m) => m.port === promoted));
      },
    },
  });
  const outcome = await rebuilt.then(
    () => "opened",
    (e: unknown) => (e instanceof RebuildLockLost ? "stopped" : e),
  );

  // Open means written: the promoted replica lacks the wallet, so its shard is not opened and the rebuild stops.
  expect(await gw.services.redis.exists(walletHash(wallet))).toBe(0);
  expect(await gw.services.redis.get(k.fence(shard))).toMatch(/^R:\d+$/);
  expect(outcome).toBe("stopped");

  // The repair job re-applies the wallet's credit (the promoted replica lacks it): the wallet's books stay whole.
  await gw.services.repairNow();
  expect(await gw.ledgerState(wallet)).toEqual({ balance: 5_000_000 - 2 * charge, locked: 0 });
  expect(await served(key)).toMatchObject(echoed);
  expect(await gw.ledgerState(wallet)).toEqual({ balance: 5_000_000 - 3 * charge, locked: 0 });
  await gw.services.flusher.drain();
  const audit = await runAudit(gw.services, { fix: false });
  expect(audit.output.split("\n")[0]).toBe("audit: the books agree (Redis = Postgres + outbox)");

  // The cluster whole again, for whatever runs after.
  await cluster.restart(master!.port);
  await cluster.waitHealthy();
}, 90_000);
