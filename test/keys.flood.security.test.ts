/**
 * A flood of well-formed unknown API keys must not cost a Postgres query each: Redis answers for known keys,
 * misses are remembered briefly, and the Postgres lookups (repairs of a key Redis lost) are batched at most every
 * 100 ms. Queries are counted by postgres.js' debug hook on the services' own client.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { hashApiKey } from "../src/auth/apiKeys.ts";
import { startGateway, type TestGateway } from "./helpers/gateway.ts";

let gw: TestGateway;
let lookups = 0;
beforeAll(async () => {
  gw = await startGateway({}, { onQuery: (q) => void (/FROM api_keys\s+WHERE key_hash/.test(q) && lookups++) });
}, 60_000);
afterAll(async () => {
  await gw?.close();
});

const randomKey = () => "sk-" + Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("hex");
const usage = (wallet: string, key: string) => gw.call("GET", `/v1/usage/${wallet}`, undefined, { authorization: `Bearer ${key}` });
const chat = (key: string) =>
  gw.call(
    "POST",
    "/v1/chat/completions",
    { model: "standin/echo", messages: [{ role: "user", content: "hi" }] },
    { authorization: `Bearer ${key}` },
  );

describe("unknown API key flood", () => {
  test("300 distinct unknown keys at once: 300 × 401, a bounded number of Postgres lookups", async () => {
    const { wallet } = await gw.newWallet(1);
    const keys = Array.from({ length: 300 }, randomKey);
    const before = lookups;
    const started = Date.now();
    const answers = await Promise.all(keys.map((k, i) => (i % 2 ? chat(k) : usage(wallet, k))));
    const elapsed = Date.now() - started;
    for (const a of answers) expect(a).toMatchObject({ status: 401, body: { error: "UNAUTHORIZED" } });
    // One batched lookup per 100 ms window at most, whatever the number of keys.
    expect(lookups - before).toBeLessThanOrEqual(1 + Math.ceil(elapsed / 100));
    expect(lookups - before).toBeLessThan(30);

    // The same keys again: answered from the miss cache, no lookup at all.
    const again = lookups;
    for (const k of keys.slice(0, 50)) expect((await chat(k)).status).toBe(401);
    expect(lookups).toBe(again);
  });

  test("a key created just now, in this process or another, is not refused by the miss cache", async () => {
    const { account, wallet } = await gw.newWallet(1);
    // Created here: accepted at once.
    const res = await gw.call("POST", "/v1/auth/keys", { ...(await gw.signIn(account)), label: "new" });
    expect(res.status).toBe(201);
    expect((await usage(wallet, res.body.key)).status).toBe(200);

    // "Another process": a key presented while unknown, then created elsewhere (Postgres, then Redis, as
    // KeyService does). Redis is asked before the miss cache, so it is accepted at once.
    const key = randomKey();
    expect((await usage(wallet, key)).status).toBe(401);
    const hash = hashApiKey(key);
    const [row] = await gw.services.sql<{ id: number }[]>`
      INSERT INTO api_keys (wallet, key_hash, label) VALUES (${wallet}, ${hash}, 'elsewhere') RETURNING id`;
    const p = gw.services.ledger.principal(row!.id, wallet);
    await gw.services.redis
      .multi()
      .hset(p.apiKeyName, { revoked: "0", budget: "" })
      .set(gw.services.ledger.names.keyHash(hash), `${row!.id}|${wallet}`)
      .exec();
    expect((await usage(wallet, key)).status).toBe(200);
  });

  test("a key Redis lost is still repaired from Postgres through the batched lookup", async () => {
    const { wallet, key } = await gw.newWallet(1);
    await gw.services.redis.del(gw.services.ledger.names.keyHash(hashApiKey(key)));
    const before = lookups;
    expect((await usage(wallet, key)).status).toBe(200);
    expect(lookups - before).toBe(1);
    expect((await chat(key)).status).toBe(200);
  });
});
