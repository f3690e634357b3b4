import { expect } from "bun:test";
import { runAudit } from "../../src/audit/audit.ts";
import type { ChildGateway } from "./child.ts";
import { BASE, type TestGateway } from "./gateway.ts";

/** One gateway process a test sends requests to: the in-process app, or a child's HTTP port. */
export interface Door {
  name: string;
  post(path: string, key: string, body: unknown): Promise<Response>;
}

/** The test file's own gateway, reached in process. */
export function inProcess(gw: TestGateway): Door {
  return {
    name: "in-process",
    post: (path, key, body) =>
      gw.handle(
        new Request(BASE + path, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
          body: JSON.stringify(body),
        }),
      ),
  };
}

/** A child gateway (`bun src/main.ts serve`), reached over HTTP. */
export function overHttp(child: ChildGateway, name: string): Door {
  return {
    name,
    post: (path, key, body) =>
      fetch(child.url + path, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify(body),
      }),
  };
}

/** What the client saw of one request: its status, its error code if any, and when the whole answer had arrived. */
export interface Answer {
  status: number;
  error?: string;
  sentAt: number;
  doneAt: number;
  door: string;
}

/** A chat request read to its end; a connection that broke is status 0. */
export async function chat(door: Door, key: string, body: unknown): Promise<Answer> {
  const sentAt = performance.now();
  try {
    const res = await door.post("/v1/chat/completions", key, body);
    const parsed = (await res.json()) as { error?: string };
    return { status: res.status, error: parsed.error, sentAt, doneAt: performance.now(), door: door.name };
  } catch {
    return { status: 0, sentAt, doneAt: performance.now(), door: door.name };
  }
}

/** Polls `cond` until it holds or `ms` passed; returns whether it held (the caller asserts, so a test can fail). */
export async function until(cond: () => Promise<boolean>, ms: number, stepMs = 20): Promise<boolean> {
  for (const deadline = performance.now() + ms; ;) {
    if (await cond()) return true;
    if (performance.now() > deadline) return false;
    await Bun.sleep(stepMs);
  }
}

/** Charges of a wallet (or of one key) Postgres has. */
export async function chargesIn(gw: TestGateway, wallet: string, keyId?: number): Promise<{ n: number; total: number }> {
  const [row] = await gw.services.sql<{ n: number; total: number }[]>`
    SELECT COUNT(*)::int AS n, COALESCE(SUM(amount_usdc), 0)::bigint AS total FROM ledger_events
    WHERE wallet = ${wallet} AND type = 'charge' AND (${keyId ?? null}::bigint IS NULL OR api_key_id = ${keyId ?? null})`;
  return { n: row!.n, total: Number(row!.total) };
}

/** Entries left in every shard's outbox. */
export async function outboxLeft(gw: TestGateway): Promise<number> {
  const names = gw.services.ledger.names;
  const lengths = await Promise.all(names.allShards().map((sh) => gw.services.redis.xlen(names.outbox(sh))));
  return lengths.reduce((a, n) => a + n, 0);
}

/**
 * Waits (bounded) until every outbox is empty and Postgres has `n` charges of the wallet: the children flush in
 * the background, this process drains what they have not taken (`takeOver`: and what a killed process had read,
 * as a live process does after a minute). False when it never got there.
 */
export function chargesReach(gw: TestGateway, wallet: string, n: number, opts: { takeOver?: boolean } = {}): Promise<boolean> {
  return until(async () => {
    if (opts.takeOver) await gw.services.flusher.takeOver(0);
    await gw.services.flusher.drain();
    return (await chargesIn(gw, wallet)).n >= n && (await outboxLeft(gw)) === 0;
  }, 20_000);
}

/** Lease ids (hold ids starting with "L") still in the wallet's shard's holds zset. */
export async function liveLeases(gw: TestGateway, wallet: string): Promise<string[]> {
  const s = gw.services;
  const holds = s.ledger.names.holds(s.ledger.principal(0, wallet).shard);
  return (await s.redis.zrange(holds, "0", "-1")).filter((id) => id.startsWith("L"));
}

/** A key's counters in Redis. */
export async function keyCounters(gw: TestGateway, keyId: number, wallet: string): Promise<{ spent: number; locked: number }> {
  const p = gw.services.ledger.principal(keyId, wallet);
  const [spent, locked] = await gw.services.redis.hmget(p.apiKeyName, "spent", "locked");
  return { spent: Number(spent ?? 0), locked: Number(locked ?? 0) };
}

/** `admin audit` (as the CLI runs it) finds Redis and Postgres in agreement. */
export async function expectAuditClean(gw: TestGateway): Promise<void> {
  await gw.services.chat.idle();
  await gw.services.flusher.drain();
  const audit = await runAudit(gw.services, { fix: false });
  expect(audit.output.split("\n")[0]).toBe("audit: the books agree (Redis = Postgres + outbox)");
  expect(audit.clean).toBe(true);
}

/** Requests a gateway process admitted under a lease, in memory (its /metrics). */
export async function leaseAdmissionsOf(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(/gateway_lease_admissions_total\{outcome="lease"\} (\d+)/.exec(text)?.[1] ?? 0);
}
