/**
 * The outbox flusher (Redis streams → Postgres ledger_events), the rebuild of a lost Redis from Postgres, and the
 * credits reconciler. Real redis-server, real Postgres (TEST_DATABASE_URL) or PGlite, the gateway in process.
 * Nothing runs in the background: every test moves the outbox itself with drain() / flushOnce().
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Redis } from "ioredis";
import { Flusher } from "../src/store/flusher.ts";
import { ensureLedger, rebuildLedger } from "../src/store/rebuild.ts";
import { hashApiKey } from "../src/auth/apiKeys.ts";
import { expectedCharge, startGateway, type TestGateway } from "./helpers/gateway.ts";
import { usageFor } from "./helpers/openaiStandin.ts";

let gw: TestGateway;
// PGlite takes a few seconds to start on a busy machine: give the shared gateway room.
beforeAll(async () => {
  gw = await startGateway();
}, 60_000);
afterAll(async () => {
  await gw?.close();
}, 30_000);

const GROUP = "flusher";
const messages = [{ role: "user" as const, content: "hi" }];
const usage = usageFor(messages.length); // 11 prompt, 5 completion tokens
const CHARGE = expectedCharge(usage.prompt_tokens, usage.completion_tokens);
const COST = Math.ceil(usage.prompt_tokens * 2 + usage.completion_tokens * 8); // test catalog cost: 2 / 8 USD per 1M
const streams = () => gw.services.ledger.keys.allShards().map((s) => gw.services.ledger.keys.outbox(s));

/** n answers, then their settles: these tests read the outbox on another connection than the settles use. */
async function chat(key: string, n = 1) {
  for (let i = 0; i < n; i++) await gw.openai(key).chat.completions.create({ model: "standin/echo", messages });
  await gw.services.chat.idle();
}

/** Status of a raw chat call (for the failures: the SDK's promise does not suit expect().rejects). */
async function chatStatus(key: string, model: string): Promise<number> {
  const res = await gw.call("POST", "/v1/chat/completions", { model, messages }, { authorization: `Bearer ${key}` });
  return res.status;
}

/** Entries in every outbox stream together. */
async function outboxLength(): Promise<number> {
  let n = 0;
  for (const s of streams()) n += await gw.services.redis.xlen(s);
  return n;
}

/** Entries delivered to the flusher group but not acknowledged, over every stream. */
async function pendingCount(): Promise<number> {
  let n = 0;
  for (const s of streams()) n += Number(((await gw.services.redis.xpending(s, GROUP)) as [number, ...unknown[]])[0]);
  return n;
}

/** Every outbox entry now in Redis, with its stream. */
async function outboxEntries(): Promise<{ stream: string; id: string; fields: string[] }[]> {
  const out = [];
  for (const stream of streams()) for (const [id, fields] of await gw.services.redis.xrange(stream, "-", "+")) out.push({ stream, id, fields });
  return out;
}

async function rows(wallet: string) {
  return [
    ...(await gw.services.sql<{ event_id: string; type: string; hold_id: string; api_key_id: number; model: string | null; amount_usdc: number; cost_usd_micro: number; prompt_tokens: number; completion_tokens: number }[]>`
      SELECT event_id, type, hold_id, api_key_id, model, amount_usdc, cost_usd_micro, prompt_tokens, completion_tokens
      FROM ledger_events WHERE wallet = ${wallet} ORDER BY event_id`),
  ];
}

async function totalRows(): Promise<number> {
  const [r] = await gw.services.sql<{ n: number }[]>`SELECT COUNT(*)::bigint AS n FROM ledger_events`;
  return r!.n;
}

const chargeRow = (keyId: number) => ({
  type: "charge",
  api_key_id: keyId,
  model: "standin/echo",
  amount_usdc: CHARGE,
  cost_usd_micro: COST,
  prompt_tokens: usage.prompt_tokens,
  completion_tokens: usage.completion_tokens,
});

describe("flusher", () => {
  test("drain() empties every outbox stream and writes exactly one charge row per request, summing to the key's spent", async () => {
    await gw.services.flusher.drain();
    const { wallet, key, keyId } = await gw.newWallet(5);
    const N = 7;
    await chat(key, N);
    expect(await outboxLength()).toBe(N);

    await gw.services.flusher.drain();
    for (const s of streams()) expect({ stream: s, xlen: await gw.services.redis.xlen(s) }).toEqual({ stream: s, xlen: 0 });
    expect(await pendingCount()).toBe(0);

    const got = await rows(wallet);
    expect(got).toHaveLength(N);
    for (const r of got) {
      expect(r).toMatchObject(chargeRow(keyId));
      expect(r.event_id).toBe(`charge:${r.hold_id}`);
    }
    expect(new Set(got.map((r) => r.hold_id)).size).toBe(N);
    const p = gw.services.ledger.principal(keyId, wallet);
    const [spent, requests] = await gw.services.redis.hmget(p.apiKeyKey, "spent", "requests");
    expect(Number(spent)).toBe(N * CHARGE);
    expect(got.reduce((s, r) => s + r.amount_usdc, 0)).toBe(N * CHARGE);
    expect(Number(requests)).toBe(N);
  });

  test("re-delivered copies of flushed entries insert nothing twice (ON CONFLICT on event_id)", async () => {
    await gw.services.flusher.drain();
    const { wallet, key, keyId } = await gw.newWallet(5);
    await chat(key, 3);
    const entries = await outboxEntries();
    expect(entries).toHaveLength(3);
    await gw.services.flusher.drain();
    const first = await rows(wallet);
    expect(first).toHaveLength(3);
    const before = await totalRows();

    // The same events again, twice over (new stream ids, same fields): what a redelivery looks like.
    for (let copy = 0; copy < 2; copy++) for (const e of entries) await gw.services.redis.xadd(e.stream, "*", ...e.fields);
    expect(await outboxLength()).toBe(6);
    await gw.services.flusher.drain();

    expect(await outboxLength()).toBe(0);
    expect(await pendingCount()).toBe(0);
    expect(await totalRows()).toBe(before);
    expect(await rows(wallet)).toEqual(first);
    for (const r of first) expect(r).toMatchObject(chargeRow(keyId));
  });

  test("Postgres failing mid-flush: nothing leaves the outbox until Postgres has it, then exactly once", async () => {
    await gw.services.flusher.drain();
    const { wallet, key, keyId } = await gw.newWallet(5);
    await chat(key, 4);
    const before = await totalRows();

    await gw.services.sql.unsafe("ALTER TABLE ledger_events RENAME TO ledger_events_away");
    try {
      await expect(gw.services.flusher.flushOnce()).rejects.toThrow(/ledger_events/);
      // Read by the group but neither acknowledged nor deleted: all 4 still there, pending for the flusher.
      expect(await outboxLength()).toBe(4);
      expect(await pendingCount()).toBe(4);
      // A second attempt (the pending entries first) fails the same way and loses nothing.
      await expect(gw.services.flusher.flushOnce()).rejects.toThrow(/ledger_events/);
      expect(await outboxLength()).toBe(4);
      expect(await pendingCount()).toBe(4);
    } finally {
      await gw.services.sql.unsafe("ALTER TABLE ledger_events_away RENAME TO ledger_events");
    }

    await gw.services.flusher.drain();
    expect(await outboxLength()).toBe(0);
    expect(await pendingCount()).toBe(0);
    expect(await totalRows()).toBe(before + 4);
    const got = await rows(wallet);
    expect(got).toHaveLength(4);
    for (const r of got) expect(r).toMatchObject(chargeRow(keyId));
  });

  test("crash after COMMIT, before XACK: the restarted consumer re-delivers its pending entries, no duplicate", async () => {
    await gw.services.flusher.drain();
    const { wallet, key } = await gw.newWallet(5);
    await chat(key, 3);
    const entries = await outboxEntries();
    await gw.services.flusher.drain();
    const committed = await rows(wallet);
    expect(committed).toHaveLength(3);

    // Recreate the crashed state: Postgres has the rows, and the entries are delivered to consumer "host-a"
    // of the flusher group but never acknowledged.
    for (const e of entries) await gw.services.redis.xadd(e.stream, "*", ...e.fields);
    const redis = gw.services.redis;
    await redis.xreadgroup("GROUP", GROUP, "host-a", "COUNT", 100, "STREAMS", ...streams(), ...streams().map(() => ">"));
    expect(await pendingCount()).toBe(3);

    // The gateway's own flusher (another consumer name) leaves host-a's fresh entries alone.
    await gw.services.flusher.drain();
    expect(await pendingCount()).toBe(3);
    expect(await outboxLength()).toBe(3);

    // host-a restarts under the same consumer name: its pending entries come first, insert nothing new.
    const restarted = new Flusher(gw.services.scripts.client, gw.services.sql, gw.services.ledger.keys, {}, "host-a");
    await restarted.init();
    await restarted.drain();
    expect(await pendingCount()).toBe(0);
    expect(await outboxLength()).toBe(0);
    expect(await rows(wallet)).toEqual(committed);
  });

  test("a dead consumer's entries idle past the claim time are taken over (XAUTOCLAIM) and flushed once", async () => {
    await gw.services.flusher.drain();
    const { wallet, key, keyId } = await gw.newWallet(5);
    await chat(key, 2);
    const before = await totalRows();
    const redis = gw.services.redis as Redis;

    // A consumer that read the entries and died before inserting them; make them look idle for 2 minutes.
    await redis.xreadgroup("GROUP", GROUP, "dead-host", "COUNT", 100, "STREAMS", ...streams(), ...streams().map(() => ">"));
    for (const e of await outboxEntries()) {
      expect(await redis.xclaim(e.stream, GROUP, "dead-host", 0, e.id, "IDLE", 120_000, "JUSTID")).toEqual([e.id]);
    }
    expect(await pendingCount()).toBe(2);

    // The claim runs every 50th round; 50 rounds in a row include one.
    for (let i = 0; i < 50; i++) await gw.services.flusher.flushOnce();
    await gw.services.flusher.drain();

    expect(await pendingCount()).toBe(0);
    expect(await outboxLength()).toBe(0);
    expect(await totalRows()).toBe(before + 2);
    const got = await rows(wallet);
    expect(got).toHaveLength(2);
    for (const r of got) expect(r).toMatchObject(chargeRow(keyId));
  });
});

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
    expect(await services.redis.hgetall(p.apiKeyKey)).toEqual({
      revoked: "0",
      budget: "",
      locked: "0",
      spent: String(4 * CHARGE),
      requests: "4",
      prompt_tokens: String(4 * usage.prompt_tokens),
      completion_tokens: String(4 * usage.completion_tokens),
      revenue: String(4 * (CHARGE - COST)),
    });
    const [releases] = await services.sql<{ n: number }[]>`SELECT COUNT(*)::bigint AS n FROM ledger_events WHERE wallet = ${wallet} AND type = 'release'`;
    expect(releases!.n).toBe(1);

    // Redis loses everything.
    await services.redis.flushall();
    expect(await snapshot()).toEqual({});
    expect(await ensureLedger(services.ledger, services.sql)).toBe("rebuilt");
    expect(await ensureLedger(services.ledger, services.sql)).toBe("ready");
    // What a restarting gateway does next (buildServices): the outbox consumer groups are recreated.
    await services.flusher.init();

    expect(await snapshot()).toEqual(before);
    expect(await services.redis.hgetall(services.ledger.principal(second.body.id, wallet).apiKeyKey)).toMatchObject({
      budget: "1000000",
      spent: String(CHARGE),
      requests: "1",
    });
    expect(await services.redis.get(services.ledger.keys.keyHash(hashApiKey(key)))).toBe(`${keyId}|${wallet}`);
    expect(await services.redis.hget(services.ledger.principal(other.keyId, other.wallet).apiKeyKey, "revoked")).toBe("1");
    expect(await gw.ledgerState(other.wallet)).toEqual({ balance: 2_000_000 - 2 * CHARGE, locked: 0 });
    const [unapplied] = await services.sql<{ n: number }[]>`SELECT COUNT(*)::bigint AS n FROM credits WHERE applied_at IS NULL`;
    expect(unapplied!.n).toBe(0);

    // Every credit id is known again: re-applying the wallet's grant changes nothing.
    const [grant] = await services.sql<{ event_id: string; amount_usdc: number }[]>`SELECT event_id, amount_usdc FROM credits WHERE wallet = ${wallet}`;
    expect(await services.ledger.credit(wallet, grant!.event_id, grant!.amount_usdc)).toEqual({ applied: false, balance: 3_000_000 - 5 * CHARGE });

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

describe("credits reconciler", () => {
  test("a credit in Postgres that never reached Redis is applied exactly once, however often the reconciler runs", async () => {
    const { wallet } = await gw.newWallet(1);
    const eventId = `grant:crashed-${crypto.randomUUID()}`;
    await gw.services.sql`
      INSERT INTO credits (event_id, wallet, kind, amount_usdc, reason) VALUES (${eventId}, ${wallet}, 'grant', 2500000, 'crash test')`;
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });

    expect(await gw.services.credits.reapplyPending()).toBe(1);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 3_500_000, locked: 0 });
    expect(await gw.services.credits.reapplyPending()).toBe(0);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 3_500_000, locked: 0 });

    const [row] = await gw.services.sql<{ applied: boolean }[]>`SELECT applied_at IS NOT NULL AS applied FROM credits WHERE event_id = ${eventId}`;
    expect(row!.applied).toBe(true);
  });

  test("a credit Redis applied but Postgres never marked (crash before the UPDATE) is not applied again", async () => {
    const { wallet } = await gw.newWallet(1);
    const eventId = `grant:crashed-${crypto.randomUUID()}`;
    await gw.services.sql`
      INSERT INTO credits (event_id, wallet, kind, amount_usdc, reason) VALUES (${eventId}, ${wallet}, 'grant', 700000, 'crash test')`;
    expect(await gw.services.ledger.credit(wallet, eventId, 700_000)).toEqual({ applied: true, balance: 1_700_000 });

    expect(await gw.services.credits.reapplyPending()).toBe(1);
    expect(await gw.services.credits.reapplyPending()).toBe(0);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_700_000, locked: 0 });

    // And the add() path, retried with the same id, is a duplicate that credits nothing.
    const again = await gw.services.credits.add({ eventId, wallet, kind: "grant", amountUsdc: 700_000 });
    expect(again).toMatchObject({ balance: 1_700_000, duplicate: true });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_700_000, locked: 0 });
  });
});
