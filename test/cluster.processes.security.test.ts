/**
 * Three gateway processes (`bun src/main.ts serve`, real child processes) on one Redis Cluster and one Postgres,
 * with requests spread over them: one key budget and one per-wallet rate limit hold across all three (exact
 * statuses, no overspend), every charge reaches Postgres exactly once whichever process flushes it, and processes
 * killed with kill -9 in the middle of a flush lose nothing: another process takes their entries over.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { hostname } from "node:os";
import { runAudit } from "../src/audit/audit.ts";
import { type ChildGateway, childProcesses, startChildGateway } from "./helpers/child.ts";
import { startCluster, type TestCluster } from "./helpers/cluster.ts";
import { expectedCharge, startGateway, type TestGateway } from "./helpers/gateway.ts";
import { usageFor } from "./helpers/openaiStandin.ts";

const RATE_LIMIT = 10;
let cluster: TestCluster;
let gw: TestGateway;
let children: ChildGateway[] = [];

beforeAll(async () => {
  cluster = await startCluster();
  // This process creates keys and grants (and, at the end, takes over a dead process's outbox entries); the three
  // children serve the chat requests.
  gw = await startGateway({}, { cluster });
  const env = { ...gw.sharedEnv(), RATE_LIMIT_REQUESTS: String(RATE_LIMIT), RATE_LIMIT_WINDOW_S: "86400" };
  children = await Promise.all([1, 2, 3].map(() => startChildGateway(env)));
}, 90_000);

afterAll(async () => {
  for (const c of children) if (c.proc.exitCode === null) c.proc.kill("SIGKILL");
  await gw?.close();
  await cluster?.stop();
}, 30_000);

const messages = [{ role: "user" as const, content: "Say hello." }];
const usage = usageFor(messages.length);
const charge = expectedCharge(usage.prompt_tokens, usage.completion_tokens);

/** `n` requests at once, round-robin over the three processes. */
function spread(n: number, key: string, model = "standin/echo") {
  return Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const res = await fetch(`${children[i % 3]!.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify({ model, messages, max_tokens: 50 }),
      });
      return { status: res.status, body: (await res.json()) as Record<string, unknown>, headers: res.headers };
    }),
  );
}

/**
 * The wallet's ledger once no hold is open. A child answers as soon as its settle is queued on its own Redis
 * connection, so a read from this process can arrive first: wait for the condition (bounded), not a fixed time.
 */
async function settledState(wallet: string) {
  for (let i = 0; i < 500; i++) {
    const state = await gw.ledgerState(wallet);
    if (state.locked === 0) return state;
    await Bun.sleep(10);
  }
  return gw.ledgerState(wallet);
}

async function charges(wallet: string) {
  const [row] = await gw.services.sql<{ n: number; total: number }[]>`
    SELECT COUNT(*)::int AS n, COALESCE(SUM(amount_usdc), 0)::int AS total FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge'`;
  return row!;
}

describe("three gateway processes on one cluster", () => {
  test("one key budget: requests held at once over three processes never spend past it", async () => {
    // The exact reserve of one request, from a key whose budget is too small for any.
    const probe = await gw.newWallet(10, { budget_usdc: 1 });
    const [refused] = await spread(1, probe.key, "standin/slow");
    expect(refused!.status).toBe(402);
    const reserve = refused!.body.required_usdc as number;

    // A budget of exactly three reserves; "slow" answers after 2 s, so all eight are held before any settles.
    const { wallet, key } = await gw.newWallet(10, { budget_usdc: 3 * reserve });
    const results = await spread(8, key, "standin/slow");
    const statuses = results.map((r) => r.status).sort();
    expect(statuses).toEqual([200, 200, 200, 402, 402, 402, 402, 402]);
    for (const r of results) if (r.status === 402) expect(r.body).toMatchObject({ error: "KEY_BUDGET_EXCEEDED", required_usdc: reserve });
    expect(await settledState(wallet)).toEqual({ balance: 10_000_000 - 3 * charge, locked: 0 });
  }, 30_000);

  test("one per-wallet rate limit: 15 requests over three processes, exactly 10 served and 5 answered 429 uncharged", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const results = await spread(15, key);
    expect(results.filter((r) => r.status === 200)).toHaveLength(RATE_LIMIT);
    const limited = results.filter((r) => r.status !== 200);
    expect(limited).toHaveLength(5);
    for (const r of limited) {
      expect(r.status).toBe(429);
      expect(r.body.error).toBe("RATE_LIMITED");
      expect(r.headers.get("x-ratelimit-limit")).toBe(String(RATE_LIMIT));
    }
    expect(await settledState(wallet)).toEqual({ balance: 10_000_000 - RATE_LIMIT * charge, locked: 0 });
  });

  test("each charge reaches Postgres exactly once, whichever process flushed it", async () => {
    const { wallet, key } = await gw.newWallet(10);
    expect((await spread(9, key)).map((r) => r.status)).toEqual(Array(9).fill(200));
    // The children flush in the background; this process drains whatever they have not taken yet. An entry a child
    // has read stays its own until it is written and acknowledged, however long a busy machine makes that: wait for
    // every outbox to be empty (bounded), so no entry of this test is still pending when the next one counts its own.
    const outboxLeft = async () => {
      const names = gw.services.ledger.names;
      const lengths = await Promise.all(names.allShards().map((sh) => gw.services.redis.xlen(names.outbox(sh))));
      return lengths.reduce((a, n) => a + n, 0);
    };
    for (const deadline = Date.now() + 20_000; Date.now() < deadline;) {
      await gw.services.flusher.drain();
      if ((await charges(wallet)).n === 9 && (await outboxLeft()) === 0) break;
      await Bun.sleep(20);
    }
    expect(await charges(wallet)).toEqual({ n: 9, total: 9 * charge });
    expect(await outboxLeft()).toBe(0);
  });

  test("processes killed with kill -9 in the middle of a flush lose nothing: another process takes their entries over, once", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const k = gw.services.ledger.names;
    const stream = k.outbox(k.shardOf(wallet));
    // Each child's flusher runs in its background process, under a name taken from the child's pid.
    const childConsumers = new Set(children.map((c) => `${hostname()}-${c.proc.pid}-background`));
    const backgrounds = children.flatMap((c) => childProcesses(c.proc.pid).background);
    expect(backgrounds).toHaveLength(children.length);
    const before = await charges(wallet);

    await gw.services.sql.begin(async (tx) => {
      // Every insert into ledger_events waits for this transaction: a flusher that read entries is stuck mid-flush.
      await tx`LOCK TABLE ledger_events IN EXCLUSIVE MODE`;
      expect((await spread(3, key)).map((r) => r.status)).toEqual([200, 200, 200]);
      // Wait until the children's flushers have read all three (they stay pending: not acked, not inserted).
      let pending: [string, string][] = [];
      for (let i = 0; i < 200; i++) {
        const [count, , , consumers] = (await gw.services.redis.xpending(stream, "flusher")) as [
          number,
          string,
          string,
          [string, string][] | null,
        ];
        pending = consumers ?? [];
        if (count === 3) break;
        await Bun.sleep(25);
      }
      expect(pending.reduce((n, [, c]) => n + Number(c), 0)).toBe(3);
      for (const [consumer] of pending) expect(childConsumers.has(consumer)).toBe(true);
      // The processes holding the entries (the background processes) and the serving ones, all at once.
      for (const pid of backgrounds) process.kill(pid, "SIGKILL");
      for (const c of children) c.proc.kill("SIGKILL");
      await Promise.all(children.map((c) => c.proc.exited));
      for (let i = 0; i < 200 && backgrounds.some(alive); i++) await Bun.sleep(10);
      expect(backgrounds.filter(alive)).toEqual([]);
    });

    // The entries are still in the outbox, held by dead readers; a live process claims and flushes them.
    expect(await gw.services.redis.xlen(stream)).toBe(3);
    expect(await gw.services.flusher.takeOver(0)).toBe(3);
    await gw.services.flusher.drain();
    expect(await gw.services.redis.xlen(stream)).toBe(0);
    expect(await charges(wallet)).toEqual({ n: before.n + 3, total: before.total + 3 * charge });
    expect(await settledState(wallet)).toEqual({ balance: 10_000_000 - 3 * charge, locked: 0 });
  }, 30_000);

  test("afterwards `admin audit` finds Redis and Postgres in agreement", async () => {
    await gw.services.flusher.drain();
    const audit = await runAudit(gw.services, { fix: false });
    expect(audit.output.split("\n")[0]).toBe("audit: the books agree (Redis = Postgres + outbox)");
    expect(audit.clean).toBe(true);
  }, 30_000);
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
