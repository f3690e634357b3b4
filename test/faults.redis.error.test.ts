/**
 * Redis failing under a chat request answers the spec's 503 SERVICE_UNAVAILABLE, fast, and leaves no hold behind:
 * a reserve whose reply is lost may have opened its hold, which the gateway releases once Redis answers (the
 * sweeper would expire it otherwise). Real redis-server behind a forwarder the test can cut (helpers/forwarder.ts).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Redis } from "ioredis";
import { expectedCharge, startGateway, type TestGateway } from "./helpers/gateway.ts";
import { captureErrors } from "./helpers/logs.ts";

let gw: TestGateway;
let side: Redis; // straight to the redis-server, past the forwarder
beforeAll(async () => {
  gw = await startGateway({}, { forwardRedis: true });
  side = new Redis(gw.redisSocket);
}, 60_000);
afterAll(async () => {
  side?.disconnect();
  await gw?.close();
});
const errors = captureErrors(/"Redis connection lost; reconnecting"/);

const body = { model: "standin/echo", messages: [{ role: "user", content: "hello there" }], max_tokens: 16 };
const chat = (key: string) => gw.call("POST", "/v1/chat/completions", body, { authorization: `Bearer ${key}` });
const UNAVAILABLE = { error: "SERVICE_UNAVAILABLE", message: expect.any(String) };

/** Waits until both of the gateway's Redis clients are connected again (each waits for its reconnect). */
async function reconnected() {
  await gw.services.scripts.client.send("PING", []);
  await gw.services.redis.ping();
}

/** Outbox events of a wallet, as the flusher would read them. */
async function outboxEvents(wallet: string) {
  const ledger = gw.services.ledger;
  const entries = await side.xrange(ledger.names.outbox(ledger.names.shardOf(wallet)), "-", "+");
  return entries
    .flatMap(([, f]) => JSON.parse(`[${f[1]!}]`) as { wallet: string; type: string; amount: number }[])
    .filter((e) => e.wallet === wallet);
}

/** No hold of the wallet is left once the sweeper has run: nothing locked in the wallet nor in its key. */
async function expectNothingHeld(wallet: string, keyId: number, balance: number) {
  await gw.services.chat.idle();
  await gw.services.ledger.sweepExpired();
  expect(await gw.ledgerState(wallet)).toEqual({ balance, locked: 0 });
  const [keyLocked] = (await gw.services.ledger.reads.keyCounters([gw.services.ledger.principal(keyId, wallet)], ["locked"]))[0]!;
  expect(keyLocked).toBe(0);
}

describe("Redis fails during a chat request", () => {
  test("the reserve's reply is lost (connection dropped after Redis ran it): 503, and the hold it opened is released", async () => {
    const { wallet, key, keyId } = await gw.newWallet(1);
    gw.redisForwarder!.loseNextReply("EVALSHA");
    const started = Date.now();
    const res = await chat(key);
    expect(res.status).toBe(503);
    expect(res.body).toEqual(UNAVAILABLE);
    expect(res.headers.get("retry-after")).toBe("1");
    expect(Date.now() - started).toBeLessThan(1_000);

    await reconnected();
    await expectNothingHeld(wallet, keyId, 1_000_000);
    // The reserve did run in Redis (a hold was opened) and was released, not charged.
    const events = await outboxEvents(wallet);
    expect(events.map((e) => e.type)).toEqual(["release"]);
    expect(events[0]!.amount).toBeGreaterThan(0);

    const ok = await chat(key);
    expect(ok.status).toBe(200);
    const u = ok.body.usage;
    await expectNothingHeld(wallet, keyId, 1_000_000 - expectedCharge(u.prompt_tokens, u.completion_tokens));
  });

  test("Redis unreachable: 503 at once, for a cached key and for one Redis must resolve; nothing held; normal again once back", async () => {
    const cached = await gw.newWallet(1);
    expect((await chat(cached.key)).status).toBe(200); // its key is now resolved in memory
    const fresh = await gw.newWallet(1);
    const balanceAfterFirst = (await gw.ledgerState(cached.wallet)).balance;

    await gw.redisForwarder!.down();
    try {
      for (const key of [cached.key, fresh.key]) {
        const started = Date.now();
        const res = await chat(key);
        expect(res.status).toBe(503);
        expect(res.body).toEqual(UNAVAILABLE);
        // ioredis gives up after 3 reconnect attempts (≤ 500 ms apart); the ledger's client refuses at once.
        expect(Date.now() - started).toBeLessThan(2_500);
      }
      const usage = await gw.call("GET", `/v1/usage/${cached.wallet}`, undefined, { authorization: `Bearer ${cached.key}` });
      expect(usage).toMatchObject({ status: 503, body: UNAVAILABLE });
    } finally {
      gw.redisForwarder!.up();
    }
    // The operator is told the connection went, without the redis-server's address details beyond its name.
    expect(errors.take(/"Redis connection lost; reconnecting"/).length).toBeGreaterThan(0);
    await reconnected();
    await expectNothingHeld(cached.wallet, cached.keyId, balanceAfterFirst);
    await expectNothingHeld(fresh.wallet, fresh.keyId, 1_000_000);
    expect(await outboxEvents(fresh.wallet)).toEqual([]);
    for (const key of [cached.key, fresh.key]) expect((await chat(key)).status).toBe(200);
  });

  test("Redis stalls (CLIENT PAUSE): 503 within the reserve deadline; the hold the reserve opens later is released", async () => {
    const { wallet, key, keyId } = await gw.newWallet(1);
    expect((await chat(key)).status).toBe(200);
    const balance = (await gw.ledgerState(wallet)).balance;

    await side.call("CLIENT", "PAUSE", "10000", "WRITE");
    let res;
    const started = Date.now();
    try {
      res = await chat(key);
    } finally {
      await side.call("CLIENT", "UNPAUSE");
    }
    const elapsed = Date.now() - started;
    expect(res.status).toBe(503);
    expect(res.body).toEqual(UNAVAILABLE);
    expect(elapsed).toBeGreaterThanOrEqual(1_900);
    expect(elapsed).toBeLessThan(4_000);

    await expectNothingHeld(wallet, keyId, balance);
    expect((await outboxEvents(wallet)).map((e) => e.type)).toEqual(["charge", "release"]);
  });
});
