/**
 * Credit leases (CREDIT_LEASES=on) against revokes and budgets, with a second gateway process holding the leases:
 * a revoke made in another process stops the holder within the documented bound (1 s: a lease admits nothing once
 * Redis has not confirmed it for that long), a revoke in the holder's own process at once; a budget lowered under
 * running leases stops them within the same bound and is overspent by at most what they held; a lease on a key
 * with a budget leaves the rest of the budget to other processes, as a lease on a wallet does.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type ChildGateway, freePort, startChildGateway } from "./helpers/child.ts";
import { startGateway, type TestGateway } from "./helpers/gateway.ts";
import {
  type Answer,
  chargesReach,
  chat,
  type Door,
  expectAuditClean,
  inProcess,
  keyCounters,
  leaseAdmissionsOf,
  liveLeases,
  overHttp,
  until,
} from "./helpers/leaseLoad.ts";

const BOUND_MS = 1_000;
let gw: TestGateway;
let child: ChildGateway;
let here: Door;
let there: Door;
const body = { model: "standin/echo", messages: [{ role: "user", content: "Say hello." }], max_tokens: 50 };

beforeAll(async () => {
  gw = await startGateway({ CREDIT_LEASES: "on", LEASE_TTL_S: "2", RATE_LIMIT_REQUESTS: "1000000" }, { redisPort: freePort() });
  child = await startChildGateway(gw.sharedEnv());
  here = inProcess(gw);
  there = overHttp(child, "child");
}, 90_000);

afterAll(async () => {
  if (child?.proc.exitCode === null) child.proc.kill("SIGKILL");
  await gw?.close();
}, 30_000);

/** `loops` clients sending one request after another on `doors` (in turn) into `answers`, until `stop()` says so. */
async function traffic(answers: Answer[], doors: Door[], key: string, loops: number, stop: () => boolean): Promise<void> {
  await Promise.all(
    Array.from({ length: loops }, async (_, i) => {
      for (let n = 0; !stop(); n++) answers.push(await chat(doors[(i + n) % doors.length]!, key, body));
    }),
  );
}

/** Until the wallet has a lease in Redis and 50 more requests were served since (admitted in memory by then). */
async function leasedAndServing(wallet: string, answers: Answer[]): Promise<void> {
  expect(await until(async () => (await liveLeases(gw, wallet)).length > 0, 10_000)).toBe(true);
  const from = answers.length;
  expect(await until(async () => answers.slice(from).filter((a) => a.status === 200).length >= 50, 10_000)).toBe(true);
}

describe("credit leases: revoke and budget bounds", () => {
  test("a key revoked in another process stops being served by the process holding its lease within 1 s", async () => {
    const { wallet, key, keyId } = await gw.newWallet(10);
    let stopAt = Infinity;
    const answers: Answer[] = [];
    const admitted = await leaseAdmissionsOf(child.url);
    const running = traffic(answers, [there], key, 4, () => performance.now() > stopAt);
    await leasedAndServing(wallet, answers);
    // The holder admits in memory by then (its lease admissions, not only served requests).
    expect(await until(async () => (await leaseAdmissionsOf(child.url)) >= admitted + 40, 10_000)).toBe(true);
    const before = performance.now();
    await gw.services.keys.revoke(wallet, keyId);
    const revoked = performance.now();
    stopAt = revoked + BOUND_MS + 500;
    await running;

    const ok = answers.filter((a) => a.status === 200);
    const last = Math.max(...ok.map((a) => a.doneAt));
    console.log(
      `revoke in another process: last 2xx ${Math.round(last - revoked)} ms after the revoke returned (it took ${Math.round(revoked - before)} ms); ${ok.length} served`,
    );
    // No request sent a bound after the revoke is served: the holder's last confirmed lease call went out before it.
    for (const a of answers) if (a.sentAt > revoked + BOUND_MS) expect(a).toMatchObject({ status: 401, error: "UNAUTHORIZED" });
    // Admitted within the bound: the last request served was sent before it (its answer may take longer on a busy machine).
    expect(Math.max(...ok.map((a) => a.sentAt)) - revoked).toBeLessThan(BOUND_MS);
    for (const a of answers) expect([200, 401]).toContain(a.status);
    expect(answers.filter((a) => a.sentAt > revoked + BOUND_MS).length).toBeGreaterThan(0);
    // Charged once each, the lease given back by its process (idle, then closed), the books balanced.
    expect(await chargesReach(gw, wallet, ok.length)).toBe(true);
    expect(
      await until(async () => (await gw.ledgerState(wallet)).locked === 0 && (await liveLeases(gw, wallet)).length === 0, 10_000),
    ).toBe(true);
    expect(await keyCounters(gw, keyId, wallet)).toEqual({ spent: 10_000_000 - (await gw.ledgerState(wallet)).balance, locked: 0 });
    await expectAuditClean(gw);
  }, 60_000);

  test("a key revoked in the process holding its lease is refused from the next request on", async () => {
    const { wallet, key, keyId } = await gw.newWallet(10);
    let stopAt = Infinity;
    const answers: Answer[] = [];
    const running = traffic(answers, [here], key, 4, () => performance.now() > stopAt);
    await leasedAndServing(wallet, answers);
    await gw.services.keys.revoke(wallet, keyId);
    const revoked = performance.now();
    stopAt = revoked + 200;
    await running;
    const after = answers.filter((a) => a.sentAt >= revoked);
    expect(after.length).toBeGreaterThan(0);
    for (const a of after) expect(a).toMatchObject({ status: 401, error: "UNAUTHORIZED" });
    const served = answers.filter((a) => a.status === 200).length;
    await gw.services.leases!.quiet();
    expect(await chargesReach(gw, wallet, served)).toBe(true);
    expect(
      await until(async () => (await gw.ledgerState(wallet)).locked === 0 && (await liveLeases(gw, wallet)).length === 0, 10_000),
    ).toBe(true);
    await expectAuditClean(gw);
  }, 60_000);

  test("a budget lowered under two processes' leases stops them within 1 s, overspent by at most what they held", async () => {
    const { wallet, key, keyId } = await gw.newWallet(10, { budget_usdc: 5_000_000 });
    let stopAt = Infinity;
    const answers: Answer[] = [];
    const running = traffic(answers, [here, there], key, 6, () => performance.now() > stopAt);
    await leasedAndServing(wallet, answers);
    expect(await until(async () => (await liveLeases(gw, wallet)).length === 2, 10_000)).toBe(true);
    // Postgres first (the record), then Redis, with what the key had spent and locked at that instant.
    const p = gw.services.ledger.principal(keyId, wallet);
    await gw.services.sql`UPDATE api_keys SET budget_usdc = 1 WHERE id = ${keyId}`;
    const [, [, counters]] = (await gw.services.redis
      .multi()
      .hset(p.apiKeyName, "budget", "1")
      .hmget(p.apiKeyName, "spent", "locked")
      .exec())! as [unknown, [unknown, [string, string]]];
    const lowered = performance.now();
    const [spentThen, lockedThen] = counters.map(Number) as [number, number];
    stopAt = lowered + BOUND_MS + 500;
    await running;

    const ok = answers.filter((a) => a.status === 200);
    const last = Math.max(...ok.map((a) => a.doneAt));
    console.log(`budget lowered: last 2xx ${Math.round(last - lowered)} ms after; ${lockedThen} µUSDC locked by leases and holds then`);
    for (const a of answers) if (a.sentAt > lowered + BOUND_MS) expect(a).toMatchObject({ status: 402, error: "KEY_BUDGET_EXCEEDED" });
    expect(answers.filter((a) => a.sentAt > lowered + BOUND_MS).length).toBeGreaterThan(0);
    expect(last - lowered).toBeLessThan(BOUND_MS + 300);
    await gw.services.chat.idle();
    expect(await chargesReach(gw, wallet, ok.length)).toBe(true);
    expect(
      await until(async () => (await gw.ledgerState(wallet)).locked === 0 && (await liveLeases(gw, wallet)).length === 0, 10_000),
    ).toBe(true);
    const { spent } = await keyCounters(gw, keyId, wallet);
    // Spent after the lowering: only requests already admitted or held then.
    expect(spent - spentThen).toBeLessThanOrEqual(lockedThen);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - spent, locked: 0 });
    await expectAuditClean(gw);
  }, 60_000);

  test("a lease on a key with a budget takes at most half of what is left of it, like a lease on a wallet", async () => {
    const { wallet, keyId } = await gw.newWallet(10, { budget_usdc: 10_000 });
    const p = gw.services.ledger.principal(keyId, wallet);
    const ask = {
      leaseId: `Ltest.${keyId}`,
      target: 1_000_000,
      floor: 0,
      sharePerMille: 500,
      least: 0,
      slots: 0,
      slotsBack: 0,
      slotsWindow: 0,
      ttlMs: 2_000,
    };
    const r = await gw.services.ledger.lease(p, ask);
    expect(r).toMatchObject({ ok: true, locked: 5_000, before: 0 });
    // Another process's lease finds half of the rest; the wallet's share alone would have let the first take it all.
    expect(await gw.services.ledger.lease(p, { ...ask, leaseId: `Ltest.${keyId}.2` })).toMatchObject({ ok: true, locked: 2_500 });
    for (const id of [ask.leaseId, `${ask.leaseId}.2`])
      expect(await gw.services.ledger.lease(p, { ...ask, leaseId: id, target: 0 })).toMatchObject({ ok: true, locked: 0 });
    expect(await keyCounters(gw, keyId, wallet)).toEqual({ spent: 0, locked: 0 });
    await expectAuditClean(gw);
  });
});
