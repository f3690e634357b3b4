/**
 * Credit leases (CREDIT_LEASES=on), the give-back on a refusal (src/billing/leaseGiveBack.ts): a reserve refused
 * while this process's leases on the wallet hold what it lacked gets it back from all of them at once, the other
 * keys' leases included, and is tried once more; one process refuses at the same point as without leases.
 */
import { expect, test } from "bun:test";
import { sharedGateway } from "./helpers/gateway.ts";
import { type Answer, chat, expectAuditClean, inProcess, liveLeases, until } from "./helpers/leaseLoad.ts";

const LIMIT = 40;
const gw = sharedGateway({ CREDIT_LEASES: "on", RATE_LIMIT_REQUESTS: String(LIMIT), RATE_LIMIT_WINDOW_S: "86400" });
const body = { model: "standin/echo", messages: [{ role: "user", content: "Say hello." }], max_tokens: 50 };
const door = inProcess(gw);

/** A stream that never ends (its hold stays in use until the client goes away: `res.body.cancel()`). */
async function hanging(key: string, max_tokens: number): Promise<Response> {
  const res = await gw.handle(
    new Request("https://gateway.test/v1/chat/completions", {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ ...body, model: "standin/hang", stream: true, max_tokens }),
    }),
  );
  expect(res.status).toBe(200);
  await gw.services.leases!.quiet();
  return res;
}

/** Sequential requests of the key until the first refusal: how many were served, and that refusal. */
async function drain(key: string): Promise<{ served: number; refusal: Answer }> {
  for (let served = 0; ; served++) {
    const a = await chat(door, key, body);
    if (a.status !== 200) return { served, refusal: a };
    expect(served).toBeLessThan(LIMIT);
  }
}

/** Lets the streams go, then waits until the wallet's leases are closed (idle 2 s, their unused slots back). */
async function letGo(streams: Response[], wallet: string): Promise<void> {
  for (const res of streams) await res.body?.cancel();
  await gw.services.chat.idle();
  expect(await until(async () => (await liveLeases(gw, wallet)).length === 0, 10_000)).toBe(true);
}

test("a 429 while another key's lease in this process holds unused slots of the wallet's window: they come back, the window serves exactly its limit", async () => {
  const a = await gw.newWallet(10);
  const b = await gw.newWallet(0, {}, a.account);
  // Key A opens its lease, then keeps it in use with a stream that never ends: the lease is renewed (four rate
  // slots of the window, unused) instead of going idle and giving them back by itself.
  expect((await chat(door, a.key, body)).status).toBe(200);
  await gw.services.leases!.quiet();
  const stream = await hanging(a.key, 50);
  expect((await liveLeases(gw, a.wallet)).length).toBe(1);

  // Key B, on the same wallet, drains the window one request at a time.
  const { served, refusal } = await drain(b.key);
  expect({ served: 2 + served, refusal: refusal.error }).toEqual({ served: LIMIT, refusal: "RATE_LIMITED" });
  await letGo([stream], a.wallet);
  await expectAuditClean(gw);
}, 60_000);

test("a 402 another key's lease in this process can cure, the key having none of its own: the credit comes back, and the retried request counts one rate slot", async () => {
  const big = { ...body, max_tokens: 4096 };
  const probe = await gw.newWallet(10, { budget_usdc: 1 });
  const hold = (await gw.call("POST", "/v1/chat/completions", big, { authorization: `Bearer ${probe.key}` })).body.required_usdc;
  expect(hold).toBeGreaterThan(40_000);
  const a = await gw.newWallet(1);
  const b = await gw.newWallet(0, {}, a.account);
  const c = await gw.newWallet(0, {}, a.account);
  // Key A's lease opens at four of its holds and stays in use (a small stream that never ends), unused otherwise.
  expect((await chat(door, a.key, big)).status).toBe(200);
  await gw.services.leases!.quiet();
  const streams = [await hanging(a.key, 50)];
  // Key C's streams hold the rest of the wallet but less than one hold.
  for (let s = await gw.ledgerState(a.wallet); s.balance - s.locked >= hold; s = await gw.ledgerState(a.wallet)) {
    expect(streams.length).toBeLessThan(LIMIT);
    streams.push(await hanging(c.key, 4096));
  }
  // Key B's request fits neither outside the leases nor in a lease of its own (too little left to open one): it is
  // served once A's lease gives back what it does not use.
  expect(await chat(door, b.key, big)).toMatchObject({ status: 200 });
  const served = 1 + streams.length + 1;
  await letGo(streams, a.wallet);

  // Every request counted one slot of the window and no more, the retried one included: the rest is served.
  await gw.grant(a.wallet, 9_000_000);
  const more = await drain(b.key);
  expect({ served: served + more.served, refusal: more.refusal.error }).toEqual({ served: LIMIT, refusal: "RATE_LIMITED" });
  await expectAuditClean(gw);
}, 60_000);
