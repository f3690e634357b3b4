/**
 * Credit leases (CREDIT_LEASES=on) over three gateway processes on one Redis and one Postgres: this process and
 * two children (`bun src/main.ts serve`). Small and large wallets, keys with and without budgets, hammered from
 * all three at once: nothing is overspent, every answer is charged once, refusals are the spec's, the audit
 * balances and every lease is given back; a wallet too small to lease is refused at the same point as without
 * leases, and so is a wallet just large enough to lease once its last credit is reached.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type ChildGateway, freePort, startChildGateway } from "./helpers/child.ts";
import { expectedCharge, startGateway, type TestGateway } from "./helpers/gateway.ts";
import {
  type Answer,
  chargesIn,
  chargesReach,
  chat,
  type Door,
  expectAuditClean,
  inProcess,
  keyCounters,
  liveLeases,
  overHttp,
  until,
} from "./helpers/leaseLoad.ts";
import { usageFor } from "./helpers/openaiStandin.ts";

let gw: TestGateway;
let children: ChildGateway[] = [];
let doors: Door[] = [];
const body = { model: "standin/echo", messages: [{ role: "user", content: "Say hello." }], max_tokens: 50 };
const charge = expectedCharge(usageFor(1).prompt_tokens, usageFor(1).completion_tokens);
/** The request's hold (its exact reserve), read from a 402 in beforeAll. */
let hold = 0;

beforeAll(async () => {
  const env = { CREDIT_LEASES: "on", LEASE_TTL_S: "2", RATE_LIMIT_REQUESTS: "1000000" };
  gw = await startGateway(env, { redisPort: freePort() });
  children = await Promise.all([1, 2].map(() => startChildGateway(gw.sharedEnv())));
  doors = [inProcess(gw), ...children.map((c, i) => overHttp(c, `child-${i + 1}`))];
  const probe = await gw.newWallet(10, { budget_usdc: 1 });
  const refused = await gw.call("POST", "/v1/chat/completions", body, { authorization: `Bearer ${probe.key}` });
  expect(refused.status).toBe(402);
  hold = refused.body.required_usdc;
  expect(charge).toBeLessThan(hold);
}, 90_000);

afterAll(async () => {
  for (const c of children) if (c.proc.exitCode === null) c.proc.kill("SIGKILL");
  await gw?.close();
}, 30_000);

/** `loops` clients at once, each on its own door in turn, each sending up to `max` requests; a drain stops a client at its first refusal. */
async function hammer(key: string, loops: number, max: number, drain: boolean): Promise<Answer[]> {
  const all: Answer[] = [];
  await Promise.all(
    Array.from({ length: loops }, async (_, i) => {
      for (let n = 0; n < max; n++) {
        const a = await chat(doors[(i + n) % doors.length]!, key, body);
        all.push(a);
        if (drain && a.status !== 200) return;
      }
    }),
  );
  return all;
}

/** Sequential requests on one door until the first refusal: how many were served, and that refusal. */
async function drainOn(door: Door, key: string): Promise<{ served: number; refusal: Answer }> {
  for (let served = 0; ; served++) {
    const a = await chat(door, key, body);
    if (a.status !== 200) return { served, refusal: a };
    expect(served).toBeLessThan(10_000);
  }
}

/** Requests served one at a time, with no lease, from `left` µUSDC (of the wallet or of the budget), before a 402. */
function servedFrom(left: number): number {
  return left >= hold ? Math.floor((left - hold) / charge) + 1 : 0;
}

/** Waits (bounded: a lease idle for 2 s is closed at the next 250 ms tick) until no lease or hold locks the wallets. */
async function expectAllGivenBack(wallets: string[]): Promise<void> {
  const free = await until(async () => {
    for (const w of wallets) if ((await gw.ledgerState(w)).locked !== 0 || (await liveLeases(gw, w)).length > 0) return false;
    return true;
  }, 10_000);
  for (const w of wallets)
    expect({ wallet: w, ...(await gw.ledgerState(w)), leases: await liveLeases(gw, w) }).toMatchObject({ locked: 0, leases: [] });
  expect(free).toBe(true);
}

describe("credit leases over three processes", () => {
  test("small, threshold and large wallets, keys with and without budgets, hammered from three processes: no overspend, each answer charged once", async () => {
    const small = await gw.newWallet(0); // too small to lease: 6 holds
    await gw.grant(small.wallet, 6 * hold);
    const edge = await gw.newWallet(0); // just above what a lease needs (4 holds at half the wallet)
    await gw.grant(edge.wallet, 9 * hold);
    const large = await gw.newWallet(10);
    const budgeted = await gw.newWallet(0, { budget_usdc: 20 * hold }, large.account);
    const tight = await gw.newWallet(10, { budget_usdc: 9 * hold });

    const runs = await Promise.all([
      hammer(small.key, 4, 50, true),
      hammer(edge.key, 4, 50, true),
      hammer(large.key, 4, 25, false),
      hammer(budgeted.key, 4, 50, true),
      hammer(tight.key, 4, 50, true),
    ]);
    const [onSmall, onEdge, onLarge, onBudgeted, onTight] = runs;
    const ok = (as: Answer[]) => as.filter((a) => a.status === 200).length;
    const refusals = (as: Answer[]) => [...new Set(as.filter((a) => a.status !== 200).map((a) => `${a.status} ${a.error}`))];
    expect(onLarge.map((a) => a.status)).toEqual(Array(100).fill(200));
    for (const as of [onSmall, onEdge]) expect(refusals(as)).toEqual(["402 INSUFFICIENT_BALANCE"]);
    for (const as of [onBudgeted, onTight]) expect(refusals(as)).toEqual(["402 KEY_BUDGET_EXCEEDED"]);
    // Every door served some of the large wallet's requests.
    for (const d of doors) expect(onLarge.some((a) => a.door === d.name)).toBe(true);
    console.log(
      `served: small ${ok(onSmall)}, edge ${ok(onEdge)}, large ${ok(onLarge)}, budgeted ${ok(onBudgeted)}, tight ${ok(onTight)}; hold ${hold}, charge ${charge}`,
    );

    // Leases idle for 2 s are given back by their own processes (no sweeper): nothing stays locked.
    const wallets = [small.wallet, edge.wallet, large.wallet, tight.wallet];
    await expectAllGivenBack(wallets);

    // Each 2xx charged exactly once (Postgres, after every process's outbox is drained), never past the credit.
    const served = new Map([
      [small.wallet, ok(onSmall)],
      [edge.wallet, ok(onEdge)],
      [large.wallet, ok(onLarge) + ok(onBudgeted)],
      [tight.wallet, ok(onTight)],
    ]);
    const credit = new Map([
      [small.wallet, 6 * hold],
      [edge.wallet, 9 * hold],
      [large.wallet, 10_000_000],
      [tight.wallet, 10_000_000],
    ]);
    for (const [wallet, n] of served) {
      expect(await chargesReach(gw, wallet, n)).toBe(true);
      expect(await chargesIn(gw, wallet)).toEqual({ n, total: n * charge });
      expect(await gw.ledgerState(wallet)).toEqual({ balance: credit.get(wallet)! - n * charge, locked: 0 });
    }
    expect((await keyCounters(gw, budgeted.keyId, large.wallet)).spent).toBeLessThanOrEqual(20 * hold);
    expect((await keyCounters(gw, tight.keyId, tight.wallet)).spent).toBeLessThanOrEqual(9 * hold);
    await expectAuditClean(gw);

    // A refusal under load may come from credit another process's lease held for a moment; once the leases are
    // back, what is left is served one by one up to the same point as without leases, wherever it is asked.
    for (const [i, [key, left]] of [
      [small.key, 6 * hold - ok(onSmall) * charge],
      [edge.key, 9 * hold - ok(onEdge) * charge],
      [budgeted.key, 20 * hold - ok(onBudgeted) * charge],
      [tight.key, 9 * hold - ok(onTight) * charge],
    ].entries()) {
      const { served: more } = await drainOn(doors[i % doors.length]!, key as string);
      expect(more).toBe(servedFrom(left as number));
    }
    await expectAllGivenBack(wallets);
    await expectAuditClean(gw);
  }, 120_000);

  test("a wallet too small to lease, and one just large enough, are refused at the same point as without leases", async () => {
    for (const [credit, door] of [
      [6 * hold, 0],
      [9 * hold, 0],
      [12 * hold, 1],
      [40 * hold, 2],
    ] as const) {
      const { wallet, key } = await gw.newWallet(0);
      await gw.grant(wallet, credit);
      const { served, refusal } = await drainOn(doors[door]!, key);
      expect({ credit, served }).toEqual({ credit, served: servedFrom(credit) });
      expect(refusal).toMatchObject({ status: 402, error: "INSUFFICIENT_BALANCE" });
      await expectAllGivenBack([wallet]);
    }
    // The same for a key's budget on a large wallet.
    const { key, keyId, wallet } = await gw.newWallet(10, { budget_usdc: 12 * hold });
    const { served, refusal } = await drainOn(doors[0]!, key);
    expect(served).toBe(servedFrom(12 * hold));
    expect(refusal).toMatchObject({ status: 402, error: "KEY_BUDGET_EXCEEDED" });
    await expectAllGivenBack([wallet]);
    expect(await keyCounters(gw, keyId, wallet)).toEqual({ spent: served * charge, locked: 0 });
    await expectAuditClean(gw);
  }, 120_000);
});
