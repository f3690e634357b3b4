import { expect, test } from "bun:test";
import { Redis } from "ioredis";
import { expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { usageFor } from "./helpers/openaiStandin.ts";

const gw = sharedGateway();

test("100 concurrent requests on a balance that covers 10 reserves never overdraw", async () => {
  const { wallet, key } = await gw.newWallet(0);
  const body = { model: "standin/echo", messages: [{ role: "user", content: "hi" }], max_tokens: 1000 };
  const headers = { authorization: `Bearer ${key}` };

  // The 402 names the exact reserve of this request; fund exactly ten of them.
  const probe = await gw.call("POST", "/v1/chat/completions", body, headers);
  expect(probe.status).toBe(402);
  const reserve: number = probe.body.required_usdc;
  await gw.grant(wallet, 10 * reserve);

  const results = await Promise.all(Array.from({ length: 100 }, () => gw.call("POST", "/v1/chat/completions", body, headers)));
  const ok = results.filter((r) => r.status === 200).length;
  for (const r of results) if (r.status !== 200) expect(r.body.error).toBe("INSUFFICIENT_BALANCE");

  const charge = expectedCharge(usageFor(1).prompt_tokens, usageFor(1).completion_tokens);
  // At least the ten funded reserves succeed; more only as settled charges (smaller than reserves) free credit.
  expect(ok).toBeGreaterThanOrEqual(10);
  expect(ok * charge).toBeLessThanOrEqual(10 * reserve);
  const state = await gw.ledgerState(wallet);
  expect(state).toEqual({ balance: 10 * reserve - ok * charge, locked: 0 });
  expect(state.balance).toBeGreaterThanOrEqual(0);

  await gw.services.flusher.drain();
  const [pg] = await gw.services.sql<{ n: number; total: number }[]>`
    SELECT COUNT(*)::int AS n, COALESCE(SUM(amount_usdc), 0)::bigint AS total FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge'`;
  expect(pg).toEqual({ n: ok, total: ok * charge });
});

/** Script calls (EVALSHA + EVAL) the gateway's redis-server ran so far, from INFO commandstats. */
async function scriptCalls(): Promise<number> {
  const redis = new Redis(gw.redisSocket);
  try {
    const info = await redis.info("commandstats");
    return [...info.matchAll(/cmdstat_eval(?:sha)?:calls=(\d+)/g)].reduce((n, m) => n + Number(m[1]), 0);
  } finally {
    redis.disconnect();
  }
}

test("60 concurrent requests of one wallet: exact charges and balance, in fewer script calls than requests", async () => {
  const { wallet, key } = await gw.newWallet(10);
  const before = await gw.ledgerState(wallet);
  const body = { model: "standin/echo", messages: [{ role: "user", content: "hi" }], max_tokens: 50 };
  const headers = { authorization: `Bearer ${key}` };
  const calls = await scriptCalls();

  const N = 60;
  const results = await Promise.all(Array.from({ length: N }, () => gw.call("POST", "/v1/chat/completions", body, headers)));
  expect(results.map((r) => r.status)).toEqual(Array(N).fill(200));
  // Read at once after the answers: the settles queued behind them are sent before this read.
  const charge = expectedCharge(usageFor(1).prompt_tokens, usageFor(1).completion_tokens);
  expect(await gw.ledgerState(wallet)).toEqual({ balance: before.balance - N * charge, locked: 0 });
  // A reserve and a settle per request, batched per shard: Redis ran far fewer script calls than 2 per request.
  const ran = (await scriptCalls()) - calls;
  console.log(`${N} concurrent requests: ${ran} script calls`);
  expect(ran).toBeLessThan(N);

  await gw.services.flusher.drain();
  const [pg] = await gw.services.sql<{ n: number; total: number }[]>`
    SELECT COUNT(*)::int AS n, COALESCE(SUM(amount_usdc), 0)::bigint AS total FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge'`;
  expect(pg).toEqual({ n: N, total: N * charge });
});
