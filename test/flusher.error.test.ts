/**
 * The outbox flusher (Redis streams → Postgres ledger_events): exactly once, nothing trimmed before Postgres has it,
 * re-delivery and takeover of a dead consumer's entries. Real redis-server, real Postgres (TEST_DATABASE_URL) or
 * PGlite, the gateway in process. Nothing runs in the background: every test moves the outbox itself with drain() /
 * flushOnce(). The rebuild of a lost Redis is in ledger.rebuild.happy.test.ts, the credits reconciler in
 * credits.recovery.error.test.ts.
 */
import { describe, expect, test } from "bun:test";
import type { Redis } from "ioredis";
import type { Sql } from "../src/store/db.ts";
import { Flusher, insertLedgerEvents } from "../src/store/flusher.ts";
import { sharedGateway } from "./helpers/gateway.ts";
import { CHARGE, COST, ledgerTraffic, usage } from "./helpers/ledgerTraffic.ts";

const gw = sharedGateway();

const GROUP = "flusher";
const { streams, chat, outboxLength, rows } = ledgerTraffic(() => gw);

/** Entries delivered to the flusher group but not acknowledged, over every stream. */
async function pendingCount(): Promise<number> {
  let n = 0;
  for (const s of streams()) n += Number(((await gw.services.redis.xpending(s, GROUP)) as [number, ...unknown[]])[0]);
  return n;
}

/** Every outbox entry now in Redis, with its stream. */
async function outboxEntries(): Promise<{ stream: string; id: string; fields: string[] }[]> {
  const out = [];
  for (const stream of streams())
    for (const [id, fields] of await gw.services.redis.xrange(stream, "-", "+")) out.push({ stream, id, fields });
  return out;
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
    const [spent, requests] = await gw.services.redis.hmget(p.apiKeyName, "spent", "requests");
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
    const restarted = new Flusher(gw.services.scripts.client, gw.services.sql, gw.services.ledger.names, {}, "host-a");
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

  test("a backlog larger than one insert's bound goes in several statements of at most 256 KiB, each event once", async () => {
    await gw.services.flusher.drain();
    const { wallet, key, keyId } = await gw.newWallet(5);
    await chat(key, 1);
    const [entry] = await outboxEntries();
    await gw.services.flusher.drain();
    const one = JSON.parse(entry!.fields[entry!.fields.indexOf("e") + 1]!) as { hold: string };
    // 3,000 charges of the same shape (over 512 KiB of JSON): what a round reads after a backlog.
    const events = Array.from({ length: 3000 }, (_, i) => JSON.stringify({ ...one, hold: `${one.hold}-${i}` }));
    const params: number[] = [];
    const counting = {
      unsafe: (query: string, args: string[]) => (params.push(args[0]!.length), gw.services.sql.unsafe(query, args)),
    } as unknown as Sql;
    expect(events.join(",").length).toBeGreaterThan(512 * 1024);
    await insertLedgerEvents(counting, events);
    expect(params.length).toBeGreaterThanOrEqual(3);
    for (const n of params) expect(n).toBeLessThanOrEqual(256 * 1024);
    expect(await rows(wallet)).toHaveLength(3001);

    // The same backlog again through the outbox (a redelivery): nothing twice.
    const before = await totalRows();
    for (let i = 0; i < events.length; i += 500) await gw.services.redis.xadd(entry!.stream, "*", "e", events.slice(i, i + 500).join(","));
    await gw.services.flusher.drain();
    expect(await outboxLength()).toBe(0);
    expect(await pendingCount()).toBe(0);
    expect(await totalRows()).toBe(before);
    const got = await rows(wallet);
    expect(got).toHaveLength(3001);
    for (const r of got) expect(r).toMatchObject(chargeRow(keyId));
  });
});
