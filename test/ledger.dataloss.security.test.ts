/**
 * A Redis that lost only its most recent writes (failover to a lagging replica, a crash with fsync every second)
 * must not bring back a revoked key nor drop an applied credit: the repair job reconciles both from Postgres.
 * The lost writes are removed by hand, exactly as the lagging replica would not have them, and the repair runs now.
 */
import { describe, expect, test } from "bun:test";
import { sharedGateway } from "./helpers/gateway.ts";

const gw = sharedGateway();

const chat = (key: string) =>
  gw.call(
    "POST",
    "/v1/chat/completions",
    { model: "standin/echo", messages: [{ role: "user", content: "hello" }] },
    { authorization: `Bearer ${key}` },
  );

describe("Redis lost its recent writes", () => {
  test("a revoked key comes back revoked, not usable", async () => {
    const { account, key, keyId, wallet } = await gw.newWallet(1);
    const del = await gw.call("DELETE", `/v1/auth/keys/${keyId}`, await gw.signIn(account));
    expect(del.status).toBe(200);
    const apiKeyName = gw.services.ledger.principal(keyId, wallet).apiKeyName;
    // The revocation's Redis write is lost; Postgres has it.
    await gw.services.redis.hset(apiKeyName, "revoked", "0");

    await gw.services.repairNow();
    expect(await gw.services.redis.hget(apiKeyName, "revoked")).toBe("1");
    const res = await chat(key);
    expect(res.status).toBe(401);
    expect(res.body.error).toBe("UNAUTHORIZED");
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
  });

  test("a key whose state Redis lost (a replica promoted before the key's write reached it) serves again, restored from Postgres", async () => {
    const { key, keyId, wallet } = await gw.newWallet(1, { budget_usdc: 500_000 });
    const apiKeyName = gw.services.ledger.principal(keyId, wallet).apiKeyName;
    expect((await chat(key)).status).toBe(200); // the key is cached in process from here on
    await gw.services.chat.idle();
    const afterFirst = await gw.ledgerState(wallet);
    await gw.services.redis.del(apiKeyName);

    const res = await chat(key);
    expect(res.status).toBe(200);
    await gw.services.chat.idle();
    expect(await gw.services.redis.hmget(apiKeyName, "revoked", "budget")).toEqual(["0", "500000"]);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: afterFirst.balance - (1_000_000 - afterFirst.balance), locked: 0 });
  });

  test("a revoked key whose state Redis lost stays refused: its revoke comes back from Postgres", async () => {
    const { account, key, keyId, wallet } = await gw.newWallet(1);
    expect((await chat(key)).status).toBe(200);
    await gw.services.chat.idle();
    const before = await gw.ledgerState(wallet);
    expect((await gw.call("DELETE", `/v1/auth/keys/${keyId}`, await gw.signIn(account))).status).toBe(200);
    const apiKeyName = gw.services.ledger.principal(keyId, wallet).apiKeyName;
    await gw.services.redis.del(apiKeyName);

    const res = await chat(key);
    expect(res.status).toBe(401);
    expect(res.body.error).toBe("UNAUTHORIZED");
    expect(await gw.services.redis.hget(apiKeyName, "revoked")).toBe("1");
    expect(await gw.ledgerState(wallet)).toEqual(before);
  });

  test("an applied credit missing from Redis is applied again, once, on top of later charges", async () => {
    const { key, wallet } = await gw.newWallet(1);
    const first = await chat(key);
    expect(first.status).toBe(200);
    const charged = 1_000_000 - (await gw.ledgerState(wallet)).balance;
    expect(charged).toBeGreaterThan(0);

    const eventId = `grant:${crypto.randomUUID()}`;
    await gw.services.credits.add({ eventId, wallet, kind: "grant", amountUsdc: 2_000_000, reason: "test" });
    const [row] = await gw.services.sql<
      { applied: boolean }[]
    >`SELECT applied_at IS NOT NULL AS applied FROM credits WHERE event_id = ${eventId}`;
    expect(row!.applied).toBe(true);
    // credit-3's effects are lost together (one script): the id in `credited` and the balance increment.
    const k = gw.services.ledger.names;
    const shard = k.shardOf(wallet);
    await gw.services.redis.hdel(k.credited(shard), eventId);
    await gw.services.redis.hincrby(k.wallet(shard, wallet), "balance", -2_000_000);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000 - charged, locked: 0 });

    await gw.services.repairNow();
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 3_000_000 - charged, locked: 0 });
    expect(await gw.services.redis.hget(k.credited(shard), eventId)).toBe("2000000");
    // Running it again (the next 30 s round) changes nothing.
    await gw.services.repairNow();
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 3_000_000 - charged, locked: 0 });

    // Redis and Postgres agree to the µUSDC once the outbox is drained.
    await gw.services.flusher.drain();
    const [pg] = await gw.services.sql<{ balance: number }[]>`
      SELECT (SELECT COALESCE(SUM(amount_usdc), 0) FROM credits WHERE wallet = ${wallet})
           - (SELECT COALESCE(SUM(amount_usdc), 0) FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge') AS balance`;
    expect(Number(pg!.balance)).toBe(3_000_000 - charged);
  });
});
