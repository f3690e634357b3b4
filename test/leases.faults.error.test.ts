/**
 * Credit leases (CREDIT_LEASES=on, LEASE_TTL_S=2) when a gateway process holding them goes away: killed with
 * kill -9 in the middle of its traffic (a stream in flight), every answer its clients received is charged, the
 * stream it could not finish is not, and its leased credit is free again once the leases' expiry passed (the
 * sweeper, called here); stopped with SIGTERM, it gives its leases back itself before it exits.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Redis } from "ioredis";
import { type ChildGateway, freePort, startChildGateway } from "./helpers/child.ts";
import { expectedCharge, startGateway, type TestGateway } from "./helpers/gateway.ts";
import {
  type Answer,
  chargesIn,
  chargesReach,
  chat,
  type Door,
  expectAuditClean,
  keyCounters,
  leaseAdmissionsOf,
  liveLeases,
  outboxLeft,
  overHttp,
  until,
} from "./helpers/leaseLoad.ts";
import { usageFor } from "./helpers/openaiStandin.ts";

const TTL_MS = 2_000;
/** Keeps Redis busy for ARGV[1] ms. */
const STALL = `local t = redis.call('TIME')
local start = t[1] * 1000 + math.floor(t[2] / 1000)
repeat t = redis.call('TIME') until t[1] * 1000 + math.floor(t[2] / 1000) - start >= tonumber(ARGV[1])
return 1`;
let gw: TestGateway;
const body = { model: "standin/echo", messages: [{ role: "user", content: "Say hello." }], max_tokens: 50 };
const charge = expectedCharge(usageFor(1).prompt_tokens, usageFor(1).completion_tokens);

beforeAll(async () => {
  gw = await startGateway(
    { CREDIT_LEASES: "on", LEASE_TTL_S: String(TTL_MS / 1000), RATE_LIMIT_REQUESTS: "1000000" },
    { redisPort: freePort() },
  );
}, 60_000);

afterAll(async () => {
  await gw?.close();
}, 30_000);

/** `loops` clients sending one request after another into `answers`, each until its first failure or `stop()`. */
async function traffic(answers: Answer[], door: Door, key: string, loops: number, stop: () => boolean): Promise<void> {
  await Promise.all(
    Array.from({ length: loops }, async () => {
      while (!stop()) {
        const a = await chat(door, key, body);
        answers.push(a);
        if (a.status !== 200) return;
      }
    }),
  );
}

/** Opens a stream that sends a few words and then stays silent ("hang"); resolves once its first words arrived. */
async function streamInFlight(child: ChildGateway, key: string): Promise<{ rest: Promise<string> }> {
  const res = await fetch(`${child.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
    body: JSON.stringify({ model: "standin/hang", messages: body.messages, max_tokens: 50, stream: true }),
  });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let seen = "";
  while (!seen.includes(" from")) {
    const r = await reader.read();
    if (r.done) throw new Error(`stream ended early: ${seen}`);
    seen += dec.decode(r.value, { stream: true });
  }
  const rest = (async () => {
    for (let r = await reader.read(); !r.done; r = await reader.read()) seen += dec.decode(r.value, { stream: true });
    return seen;
  })().catch(() => "broken");
  return { rest };
}

/** Until the child holds a lease on the wallet and admitted 50 more requests under it. */
async function leasing(child: ChildGateway, wallet: string): Promise<void> {
  expect(await until(async () => (await liveLeases(gw, wallet)).length > 0, 10_000)).toBe(true);
  const from = await leaseAdmissionsOf(child.url);
  expect(await until(async () => (await leaseAdmissionsOf(child.url)) >= from + 50, 10_000)).toBe(true);
}

describe("credit leases when their process goes away", () => {
  test("kill -9 mid-traffic with a stream in flight: every received answer charged once, the stream not, the leases freed within their expiry", async () => {
    const child = await startChildGateway(gw.sharedEnv());
    try {
      const { wallet, key, keyId } = await gw.newWallet(10);
      const answers: Answer[] = [];
      const running = traffic(answers, overHttp(child, "child"), key, 24, () => false);
      await leasing(child, wallet);
      const stream = await streamInFlight(child, key);
      await leasing(child, wallet);
      // Killed while Redis is busy (a script running 600 ms on another connection): the settle batch in flight
      // waits, the settles behind it too, and so must their answers, or the kill loses the charges of answers the
      // clients already have.
      const blocker = new Redis(gw.redisSocket);
      const stall = blocker.eval(STALL, 0, "600");
      // Killed once 8 answers to requests sent well into the stall arrived (answers that did not wait for their
      // settles), or 300 ms into it.
      const into = performance.now() + 50;
      await until(async () => answers.filter((a) => a.sentAt > into && a.status === 200).length >= 8, 300, 5);
      child.proc.kill("SIGKILL");
      const killed = performance.now();
      await child.proc.exited;
      await stall;
      // A renew sent before the kill ran in Redis when the stall ended, its expiry counted from then.
      const lastRenew = performance.now();
      blocker.disconnect();
      await running;
      expect(await stream.rest).not.toContain("[DONE]");

      const received = answers.filter((a) => a.status === 200).length;
      const cut = answers.filter((a) => a.status !== 200);
      expect(cut.every((a) => a.status === 0)).toBe(true);
      // What the dead process had queued reached Redis or nothing did: the charges are the answers received, plus at
      // most the requests cut off mid-answer (served by the provider, their settles sent before the kill).
      const reached = await chargesReach(gw, wallet, received, { takeOver: true });
      if (!reached) console.log("kill -9: charges", await chargesIn(gw, wallet), "outbox", await outboxLeft(gw), "received", received);
      expect(reached).toBe(true);
      const [{ n: hang } = { n: -1 }] = await gw.services.sql<{ n: number }[]>`
        SELECT COUNT(*)::int AS n FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge' AND model <> 'standin/echo'`;
      expect(hang).toBe(0);
      const charged = await chargesIn(gw, wallet);
      console.log(`kill -9: ${received} answers received, ${cut.length} cut off, ${charged.n} charged`);
      expect(charged.n).toBeGreaterThanOrEqual(received);
      expect(charged.n).toBeLessThanOrEqual(received + cut.length);
      expect(charged.total).toBe(charged.n * charge);

      // The leases expire TTL after their last renew ran in Redis: then the sweeper frees them, at once.
      const free = async () => {
        await gw.services.ledger.sweepExpired();
        return (await liveLeases(gw, wallet)).length === 0;
      };
      expect(await until(free, TTL_MS + 3_000, 50)).toBe(true);
      const freedAt = performance.now();
      console.log(
        `kill -9: leased credit freed ${Math.round(freedAt - killed)} ms after the kill, ${Math.round(freedAt - lastRenew)} ms after Redis could last renew it (LEASE_TTL_S ${TTL_MS / 1000})`,
      );
      expect(freedAt - lastRenew).toBeLessThan(TTL_MS + 500);
      // Holds reserved outside a lease keep their own lifetime (minutes); this test stands in for its passing.
      const s = gw.services;
      const holds = s.ledger.names.holds(s.ledger.principal(0, wallet).shard);
      for (const id of await s.redis.zrange(holds, "0", "-1")) {
        const marker = await s.redis.get(s.ledger.names.holdMarker(s.ledger.principal(0, wallet).shard, id));
        if (marker?.includes(`|${wallet}|`)) await s.redis.zadd(holds, "1", id);
      }
      await s.ledger.sweepExpired();
      expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charged.total, locked: 0 });
      expect(await keyCounters(gw, keyId, wallet)).toEqual({ spent: charged.total, locked: 0 });
      await expectAuditClean(gw);
    } finally {
      if (child.proc.exitCode === null) child.proc.kill("SIGKILL");
    }
  }, 90_000);

  test("SIGTERM mid-traffic: the process gives its leases back before it exits, no sweeper needed", async () => {
    const child = await startChildGateway(gw.sharedEnv());
    try {
      const { wallet, key, keyId } = await gw.newWallet(10);
      const answers: Answer[] = [];
      const running = traffic(answers, overHttp(child, "child"), key, 4, () => false);
      await leasing(child, wallet);
      expect(await child.stop()).toBe(0);
      await running;
      // Right after the exit: nothing locked, no lease left, without a sweep.
      expect((await gw.ledgerState(wallet)).locked).toBe(0);
      expect(await liveLeases(gw, wallet)).toEqual([]);
      const received = answers.filter((a) => a.status === 200).length;
      expect(await chargesReach(gw, wallet, received)).toBe(true);
      // A graceful stop finishes what it accepted: each request answered or refused before it was read, none cut off.
      expect(await chargesIn(gw, wallet)).toEqual({ n: received, total: received * charge });
      expect(await keyCounters(gw, keyId, wallet)).toEqual({ spent: received * charge, locked: 0 });
      await expectAuditClean(gw);
    } finally {
      if (child.proc.exitCode === null) child.proc.kill("SIGKILL");
    }
  }, 90_000);
});
