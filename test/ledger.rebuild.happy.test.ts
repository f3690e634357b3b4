/**
 * The rebuild of the Redis ledger from Postgres: a Redis that lost everything comes back exactly (balances, key
 * counters and state, credit ids, key lookups), whether the flusher or a request notices first, and balance changes
 * issued while a rebuild runs wait for it and apply on top. Real redis-server and Postgres, the gateway in process.
 * Races against other processes and a stalled rebuilder are in ledger.rebuild.security.test.ts.
 */
import { describe, expect, test } from "bun:test";
import { hashApiKey } from "../src/auth/apiKeys.ts";
import { ensureLedger, rebuildLedger } from "../src/rebuild/rebuild.ts";
import { sharedGateway } from "./helpers/gateway.ts";
import { CHARGE, COST, ledgerTraffic, usage } from "./helpers/ledgerTraffic.ts";
import { captureErrors } from "./helpers/logs.ts";

const gw = sharedGateway();
const errors = captureErrors(/"Redis lost the outbox consumer groups/);

const { chat, chatStatus, outboxLength, rows } = ledgerTraffic(() => gw);

describe("rebuild of a lost Redis from Postgres", () => {
  /** Every ledger hash and key mapping in Redis, key counters defaulting to "0" (a key never used has none). */
  async function snapshot() {
    const redis = gw.services.redis;
    const out: Record<string, unknown> = {};
    for (const pattern of ["gw:*:w:*", "gw:*:k:*", "gw:*:credited"]) {
      for (const k of await redis.keys(pattern)) {
        const h = await redis.hgetall(k);
        if (k.includes(":k:")) {
          for (const f of ["spent", "locked", "requests", "prompt_tokens", "completion_tokens", "revenue"]) h[f] ??= "0";
        }
        out[k] = h;
      }
    }
    for (const k of await redis.keys("gw:kh:*")) out[k] = await redis.get(k);
    return out;
  }

  test("balances, key counters, key state, credit ids and key lookups come back exactly; a revoked key stays revoked", async () => {
    const { services } = gw;
    const { account, wallet, key, keyId } = await gw.newWallet(3);
    await chat(key, 4);
    // A failed upstream call: released, so neither charged nor counted, but a 'release' row in Postgres.
    expect(await chatStatus(key, "standin/fail-500")).toBe(502);
    // A second key with a budget, used once.
    const second = await gw.call("POST", "/v1/auth/keys", { ...(await gw.signIn(account)), label: "budgeted", budget_usdc: 1_000_000 });
    expect(second.status).toBe(201);
    await chat(second.body.key, 1);
    // Another wallet whose key is used, then revoked.
    const other = await gw.newWallet(2);
    await chat(other.key, 2);
    await services.keys.revoke(other.wallet, other.keyId);

    await services.flusher.drain();
    const before = await snapshot();
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 3_000_000 - 5 * CHARGE, locked: 0 });
    const p = services.ledger.principal(keyId, wallet);
    expect(await services.redis.hgetall(p.apiKeyName)).toEqual({
      revoked: "0",
      budget: "",
      locked: "0",
      spent: String(4 * CHARGE),
      requests: "4",
      prompt_tokens: String(4 * usage.prompt_tokens),
      completion_tokens: String(4 * usage.completion_tokens),
      revenue: String(4 * (CHARGE - COST)),
    });
    const [releases] = await services.sql<
      { n: number }[]
    >`SELECT COUNT(*)::bigint AS n FROM ledger_events WHERE wallet = ${wallet} AND type = 'release'`;
    expect(releases!.n).toBe(1);

    // Redis loses everything.
    await services.redis.flushall();
    expect(await snapshot()).toEqual({});
    expect(await ensureLedger(services.ledger, services.sql)).toBe("rebuilt");
    expect(await ensureLedger(services.ledger, services.sql)).toBe("ready");
    // What a restarting gateway does next (buildServices): the outbox consumer groups are recreated.
    await services.flusher.init();

    expect(await snapshot()).toEqual(before);
    expect(await services.redis.hgetall(services.ledger.principal(second.body.id, wallet).apiKeyName)).toMatchObject({
      budget: "1000000",
      spent: String(CHARGE),
      requests: "1",
    });
    expect(await services.redis.get(services.ledger.names.keyHash(hashApiKey(key)))).toBe(`${keyId}|${wallet}`);
    expect(await services.redis.hget(services.ledger.principal(other.keyId, other.wallet).apiKeyName, "revoked")).toBe("1");
    expect(await gw.ledgerState(other.wallet)).toEqual({ balance: 2_000_000 - 2 * CHARGE, locked: 0 });
    const [unapplied] = await services.sql<{ n: number }[]>`SELECT COUNT(*)::bigint AS n FROM credits WHERE applied_at IS NULL`;
    expect(unapplied!.n).toBe(0);

    // Every credit id is known again: re-applying the wallet's grant changes nothing.
    const [grant] = await services.sql<
      { event_id: string; amount_usdc: number }[]
    >`SELECT event_id, amount_usdc FROM credits WHERE wallet = ${wallet}`;
    expect(await services.ledger.credit(wallet, grant!.event_id, grant!.amount_usdc)).toEqual({
      applied: false,
      balance: 3_000_000 - 5 * CHARGE,
    });

    // The key works (and is charged) as before; the revoked one does not.
    await chat(key, 1);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 3_000_000 - 6 * CHARGE, locked: 0 });
    expect(await chatStatus(other.key, "standin/echo")).toBe(401);
    expect(await gw.ledgerState(other.wallet)).toEqual({ balance: 2_000_000 - 2 * CHARGE, locked: 0 });

    await services.flusher.drain();
    expect(await outboxLength()).toBe(0);
    const charges = (await rows(wallet)).filter((r) => r.type === "charge");
    expect(charges).toHaveLength(6);
    expect(charges.filter((r) => r.api_key_id === keyId)).toHaveLength(5);
  });
});

describe("Redis losing its data while the gateway runs", () => {
  test("the next flusher round notices (NOGROUP), rebuilds the ledger from Postgres, and requests work again", async () => {
    const { services } = gw;
    const { wallet, key } = await gw.newWallet(2);
    await chat(key, 2);
    await services.flusher.drain();
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 2_000_000 - 2 * CHARGE, locked: 0 });

    await services.redis.flushall();
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 0, locked: 0 });
    await services.flusher.drain();
    expect(errors.take(/"Redis lost the outbox consumer groups/)).toHaveLength(1);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 2_000_000 - 2 * CHARGE, locked: 0 });
    await chat(key, 1);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 2_000_000 - 3 * CHARGE, locked: 0 });
    await services.flusher.drain();
    expect(await outboxLength()).toBe(0);
    expect((await rows(wallet)).filter((r) => r.type === "charge")).toHaveLength(3);
  });

  test("a request arriving first finds no fence (no epoch): the ledger is rebuilt from Postgres, then the request is served and charged", async () => {
    const { services } = gw;
    const { wallet, key } = await gw.newWallet(2);
    await chat(key, 2);
    await services.flusher.drain();

    await services.redis.flushall();
    await chat(key, 1);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 2_000_000 - 3 * CHARGE, locked: 0 });
    // The flusher finds its consumer groups gone and the ledger already rebuilt: nothing is rebuilt twice.
    await services.flusher.drain();
    expect(errors.take(/"Redis lost the outbox consumer groups/)).toHaveLength(1);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 2_000_000 - 3 * CHARGE, locked: 0 });
    expect((await rows(wallet)).filter((r) => r.type === "charge")).toHaveLength(3);
  });
});

describe("balance changes during a rebuild in this process", () => {
  test("a reserve and a credit issued while the rebuild runs are fenced, wait for it and then apply on top", async () => {
    const { wallet, keyId } = await gw.newWallet(1);
    const ledger = gw.services.ledger;
    const p = ledger.principal(keyId, wallet);
    let reserved = false;
    let reserve!: Promise<unknown>;
    let credit!: Promise<unknown>;
    await rebuildLedger(ledger, gw.services.sql, {
      hooks: {
        async fenced() {
          reserve = ledger.reserve(p, crypto.randomUUID(), 10_000).then(() => (reserved = true));
          credit = ledger.credit(wallet, `grant:during-rebuild-${crypto.randomUUID()}`, 5_000);
          // This read goes out on the ledger's connection after them: had they not been refused, it would see them.
          expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
          expect(reserved).toBe(false);
        },
      },
    });
    await Promise.all([reserve, credit]);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_005_000, locked: 10_000 });
  });
});
