/**
 * Credit leases (CREDIT_LEASES=on) and the per-wallet rate limit over two gateway processes (this one and a child
 * `bun src/main.ts serve`): a lease takes rate slots from the shared window ahead of its requests, so under load a
 * process may answer 429 while another's lease holds slots unused; never more than the limit is served, and once
 * the leases are back (their unused slots with them) the window serves exactly up to the limit, as without leases.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { type ChildGateway, freePort, startChildGateway } from "./helpers/child.ts";
import { startGateway, type TestGateway } from "./helpers/gateway.ts";
import {
  type Answer,
  chargesIn,
  chargesReach,
  chat,
  type Door,
  expectAuditClean,
  inProcess,
  liveLeases,
  overHttp,
  until,
} from "./helpers/leaseLoad.ts";

const LIMIT = 120;
let gw: TestGateway;
let child: ChildGateway;
let doors: Door[];
const body = { model: "standin/echo", messages: [{ role: "user", content: "Say hello." }], max_tokens: 50 };

beforeAll(async () => {
  const env = { CREDIT_LEASES: "on", LEASE_TTL_S: "2", RATE_LIMIT_REQUESTS: String(LIMIT), RATE_LIMIT_WINDOW_S: "86400" };
  gw = await startGateway(env, { redisPort: freePort() });
  child = await startChildGateway(gw.sharedEnv());
  doors = [inProcess(gw), overHttp(child, "child")];
}, 90_000);

afterAll(async () => {
  if (child?.proc.exitCode === null) child.proc.kill("SIGKILL");
  await gw?.close();
}, 30_000);

test("two processes leasing one wallet's rate window serve at most its limit, and exactly it once the leases are back", async () => {
  // One wallet, one key: clients on both processes until each is refused.
  const w = await gw.newWallet(10);
  const answers: Answer[] = [];
  await Promise.all(
    Array.from({ length: 6 }, async (_, i) => {
      for (let n = 0; ; n++) {
        const a = await chat(doors[(i + n) % 2]!, w.key, body);
        answers.push(a);
        if (a.status !== 200) return;
      }
    }),
  );
  const served = answers.filter((a) => a.status === 200).length;
  for (const a of answers) if (a.status !== 200) expect(a).toMatchObject({ status: 429, error: "RATE_LIMITED" });
  expect(served).toBeLessThanOrEqual(LIMIT);

  // The leases go back when idle, with their unused slots; then the rest of the window is served, one by one.
  const back = await until(
    async () => (await liveLeases(gw, w.wallet)).length === 0 && (await gw.ledgerState(w.wallet)).locked === 0,
    10_000,
  );
  expect(back).toBe(true);
  let more = 0;
  for (let a = await chat(doors[1]!, w.key, body); a.status === 200; a = await chat(doors[1]!, w.key, body)) more++;
  console.log(`rate limit ${LIMIT}: ${served} served under load, ${more} more once the leases were back`);
  expect(served + more).toBe(LIMIT);
  expect(await chargesReach(gw, w.wallet, LIMIT)).toBe(true);
  expect((await chargesIn(gw, w.wallet)).n).toBe(LIMIT);
  await expectAuditClean(gw);
}, 60_000);

test("one client, one process: the window serves exactly its limit, the last slots not kept by the lease's renew", async () => {
  for (const door of [0, 1, 0, 1]) {
    const { key, wallet } = await gw.newWallet(10);
    let served = 0;
    let refusal: Answer | undefined;
    for (let a = await chat(doors[door]!, key, body); ; a = await chat(doors[door]!, key, body)) {
      if (a.status !== 200) {
        refusal = a;
        break;
      }
      served++;
    }
    expect({ door, served, refusal: refusal.error }).toEqual({ door, served: LIMIT, refusal: "RATE_LIMITED" });
    expect(await until(async () => (await liveLeases(gw, wallet)).length === 0, 10_000)).toBe(true);
  }
  await expectAuditClean(gw);
}, 60_000);
