/**
 * WORKERS=2: `bun src/main.ts serve` as a real child process serves one port from two processes. Requests on fresh
 * connections (the kernel spreads them over both) are charged exactly, /metrics answers for both processes (and the
 * background process), the background jobs run in the one background process alone, a worker killed with -9 is
 * replaced, and SIGTERM stops every process after the last charge is in Postgres.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { childProcesses, freePort, startChildGateway, type ChildGateway } from "./helpers/child.ts";
import { expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { usageFor } from "./helpers/openaiStandin.ts";

const gw = sharedGateway({}, { redisPort: freePort() });
let child: ChildGateway;

beforeAll(async () => {
  child = await startChildGateway({ ...gw.sharedEnv(), WORKERS: "2" });
}, 60_000);
afterAll(async () => {
  if (child.proc.exitCode === null) await child.stop();
});

/** The primary's worker processes (the test's Redis and Postgres are not its children, its background process is not a worker). */
function workerPids(): number[] {
  return childProcesses(child.proc.pid).workers;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** One chat completion on a connection of its own, so that the kernel picks a process for it. */
async function chatOnNewConnection(key: string): Promise<Response> {
  return fetch(`${child.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", connection: "close" },
    body: JSON.stringify({ model: "standin/echo", messages: [{ role: "user", content: "hello" }], max_tokens: 16 }),
  });
}

/** The value of one Prometheus series in a /metrics answer (undefined when absent). */
function series(text: string, name: string): number | undefined {
  const line = text.split("\n").find((l) => l.slice(0, l.lastIndexOf(" ")) === name);
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(" ") + 1));
}

/** XINFO CONSUMERS rows come as flat arrays (RESP2) or maps (RESP3), depending on the client. */
function consumerName(row: unknown): string {
  return Array.isArray(row) ? String(row[1]) : String((row as { name: string }).name);
}

/** The wallet's ledger once the child has settled every hold (a settle leaves behind the answer). */
async function settled(wallet: string): Promise<{ balance: number; locked: number }> {
  for (const deadline = Date.now() + 20_000; Date.now() < deadline; await Bun.sleep(10)) {
    const state = await gw.ledgerState(wallet);
    if (state.locked === 0) return state;
  }
  return gw.ledgerState(wallet);
}

async function chargesInPostgres(wallet: string): Promise<number> {
  const [r] = await gw.services.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge'`;
  return r!.n;
}

describe("WORKERS=2 on one port", () => {
  const REQUESTS = 30;
  const charge = expectedCharge(usageFor(1).prompt_tokens, usageFor(1).completion_tokens);

  test("requests on fresh connections are charged exactly, and /metrics counts those of both processes", async () => {
    expect(workerPids()).toHaveLength(1);
    expect(childProcesses(child.proc.pid).background).toHaveLength(1);
    const { wallet, key } = await gw.newWallet(1);
    const statuses = await Promise.all(Array.from({ length: REQUESTS }, () => chatOnNewConnection(key).then((r) => r.status)));
    expect(statuses).toEqual(Array(REQUESTS).fill(200));
    expect(await settled(wallet)).toEqual({ balance: 1_000_000 - REQUESTS * charge, locked: 0 });

    const text = await (await fetch(`${child.url}/metrics`)).text();
    expect(series(text, 'gateway_http_requests_total{method="POST",route="/v1/chat/completions",status="200"}')).toBe(REQUESTS);
    expect(series(text, 'gateway_process_resident_memory_bytes{worker="0"}')).toBeGreaterThan(0);
    expect(series(text, 'gateway_process_resident_memory_bytes{worker="1"}')).toBeGreaterThan(0);
    expect(series(text, 'gateway_process_resident_memory_bytes{worker="background"}')).toBeGreaterThan(0);
    // Read from Redis once, by the process that answered: not counted once per worker.
    expect(series(text, "gateway_redis_up")).toBe(1);
  });

  test("the flusher runs in the background process alone: every charge reaches Postgres, read by no serving process", async () => {
    const { wallet, key } = await gw.newWallet(1);
    for (let i = 0; i < 6; i++) expect((await chatOnNewConnection(key)).status).toBe(200);
    for (const deadline = Date.now() + 20_000; (await chargesInPostgres(wallet)) < 6 && Date.now() < deadline;) await Bun.sleep(20);
    expect(await chargesInPostgres(wallet)).toBe(6);

    const names = gw.services.ledger.names;
    const consumers = new Set<string>();
    for (const shard of names.allShards()) {
      const stream = names.outbox(shard);
      const rows = (await gw.services.scripts.client.send("XINFO", ["CONSUMERS", stream, "flusher"], stream)) as unknown[];
      for (const row of rows) consumers.add(consumerName(row));
    }
    // Named after the primary, so that a background process started again reads what the killed one had read.
    expect([...consumers].some((c) => c.endsWith(`-${child.proc.pid}-background`))).toBe(true);
    expect([...consumers].some((c) => c.endsWith(`-${child.proc.pid}`))).toBe(false);
    for (const pid of workerPids()) expect([...consumers].some((c) => c.endsWith(`-${pid}`))).toBe(false);
  });

  test("a worker killed with -9 is replaced; requests are served meanwhile", async () => {
    const [old] = workerPids();
    process.kill(old!, "SIGKILL");
    // Until it is gone, a connection the kernel hands it would be reset: requests start once it is.
    while (workerPids().includes(old!)) await Bun.sleep(10);
    const { wallet, key } = await gw.newWallet(1);
    let served = 0;
    for (const deadline = Date.now() + 20_000; Date.now() < deadline;) {
      expect((await chatOnNewConnection(key)).status).toBe(200);
      served++;
      const now = workerPids();
      if (now.length === 1 && now[0] !== old) break;
    }
    const [replacement] = workerPids();
    expect(replacement).toBeDefined();
    expect(replacement).not.toBe(old);
    expect(await settled(wallet)).toEqual({ balance: 1_000_000 - served * charge, locked: 0 });
  });

  test("SIGTERM stops the workers, the background process and the primary; the outbox is drained into Postgres first", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const answers = await Promise.all(Array.from({ length: 8 }, () => chatOnNewConnection(key)));
    expect(answers.map((r) => r.status)).toEqual(Array(8).fill(200));
    const { workers, background } = childProcesses(child.proc.pid);
    expect(background).toHaveLength(1);
    expect(await child.stop()).toBe(0);
    expect(alive(background[0]!)).toBe(false);
    for (const pid of workers) expect(alive(pid)).toBe(false);
    expect(await chargesInPostgres(wallet)).toBe(8);
  });
});
