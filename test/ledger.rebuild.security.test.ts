/**
 * Rebuilds of the ledger from Postgres while gateways serve: fenced (no process sharing the Redis changes a balance
 * meanwhile, a stale writer is refused and retries), from one consistent snapshot, under a lock only its owner
 * renews and releases. The race test runs a second gateway as a real child process (`bun src/main.ts serve`) and
 * an admin command as another, both on this file's private Redis and database, with credits and charges racing
 * each step of the rebuild; nothing may be lost or applied twice.
 */
import { afterAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { hashRedeemCode } from "../src/modules/keys/keys.service.ts";
import { ensureLedger, rebuildLedger } from "../src/rebuild/rebuild.ts";
import { RebuildLock, RebuildLockLost } from "../src/rebuild/lock.ts";
import { reconcileFromPostgres } from "../src/rebuild/reconcile.ts";
import { spawnMain, startChildGateway, freePort, type ChildGateway } from "./helpers/child.ts";
import { expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { captureErrors } from "./helpers/logs.ts";
import { until } from "./helpers/leaseLoad.ts";

const gw = sharedGateway({}, { redisPort: freePort() });
const errors = captureErrors(/"the ledger rebuild lock was (taken over|not renewed)/);

const fences = async () =>
  Promise.all(gw.services.ledger.names.allShards().map((s) => gw.services.redis.get(gw.services.ledger.names.fence(s))));

/** Waits until Postgres has committed the credit (another process's write racing the rebuild). */
async function committed(eventId: string): Promise<void> {
  for (const deadline = Date.now() + 30_000; Date.now() < deadline; await Bun.sleep(20)) {
    const [row] = await gw.services.sql`SELECT 1 FROM credits WHERE event_id = ${eventId}`;
    if (row) return;
  }
  throw new Error(`credit ${eventId} was never committed`);
}

async function postgresBalance(wallet: string): Promise<number> {
  const [r] = await gw.services.sql<{ balance: number }[]>`
    SELECT (SELECT COALESCE(SUM(amount_usdc), 0) FROM credits WHERE wallet = ${wallet})
         - (SELECT COALESCE(SUM(amount_usdc), 0) FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge') AS balance`;
  return Number(r!.balance);
}

describe("the fence", () => {
  test("a writer with a stale epoch is refused before any write; with the current one it applies", async () => {
    const { wallet } = await gw.newWallet(0);
    const { ledger, scripts } = gw.services;
    const k = ledger.names;
    const s = k.shardOf(wallet);
    const epoch = (await gw.services.redis.get(k.fence(s)))!;
    expect(epoch).toMatch(/^\d+$/);
    const stale = String(Number(epoch) - 1);
    expect(await scripts.credit([k.wallet(s, wallet), k.credited(s), k.fence(s)], stale, "grant:stale", 5)).toEqual([0, "FENCED", epoch]);
    expect(await gw.services.redis.hget(k.credited(s), "grant:stale")).toBeNull();
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 0, locked: 0 });
    // A bad amount is refused before the first write too: nothing marked applied.
    await expect(scripts.credit([k.wallet(s, wallet), k.credited(s), k.fence(s)], epoch, "grant:bad", "1.5")).rejects.toThrow(
      /bad credit id or amount/,
    );
    expect(await gw.services.redis.hget(k.credited(s), "grant:bad")).toBeNull();
    expect(await scripts.credit([k.wallet(s, wallet), k.credited(s), k.fence(s)], epoch, "grant:stale", 5)).toEqual([1, 5]);
  });

  test("live holds survive a rebuild with their locks; a credit committed after the snapshot stays unapplied for its own writer", async () => {
    const { wallet, keyId } = await gw.newWallet(1);
    const { ledger, sql } = gw.services;
    const p = ledger.principal(keyId, wallet);
    const hold = crypto.randomUUID();
    await ledger.reserve(p, hold, 40_000);
    // A stray wallet hash Postgres knows nothing of (a tampered write) holds no money after the rebuild.
    const stray = `0x${"ab".repeat(18)}0001`;
    await gw.services.redis.hset(ledger.names.wallet(ledger.names.shardOf(stray), stray), "balance", 999, "locked", 0);
    const lateId = `grant:late-${crypto.randomUUID()}`;
    const before = await fences();
    const counts = await rebuildLedger(ledger, sql, {
      hooks: {
        async fenced() {
          expect(await fences()).toEqual(before.map(() => expect.stringMatching(/^R:\d+$/)));
        },
        async snapshotTaken() {
          await sql`INSERT INTO credits (event_id, wallet, kind, amount_usdc, reason) VALUES (${lateId}, ${wallet}, 'grant', 7000, 'late')`;
        },
      },
    });
    expect(await fences()).toEqual(before.map(() => counts.epoch));
    expect(Number(counts.epoch)).toBeGreaterThan(Number(before[0]));
    expect(counts.holds).toBeGreaterThanOrEqual(1);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 40_000 });
    expect(await gw.services.redis.hget(p.apiKeyName, "locked")).toBe("40000");
    expect(await gw.ledgerState(stray)).toEqual({ balance: 0, locked: 0 });
    const [late] = await sql<{ applied: boolean }[]>`SELECT applied_at IS NOT NULL AS applied FROM credits WHERE event_id = ${lateId}`;
    expect(late!.applied).toBe(false);

    expect(await ledger.settle(p, hold, 30_000, { promptTokens: 1, completionTokens: 1, costMicro: 1, model: "standin/echo" })).toBe(true);
    await gw.services.credits.reapplyPending();
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000 - 30_000 + 7_000, locked: 0 });
    await gw.services.flusher.drain();
    expect(await postgresBalance(wallet)).toBe(1_000_000 - 30_000 + 7_000);
  });
});

describe("a request arriving during a rebuild", () => {
  test("waits for the fence past the reserve's Redis deadline (2 s) and is served, charged once", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const { ledger, sql } = gw.services;
    let chat!: Promise<OpenAI.ChatCompletion>;
    await rebuildLedger(ledger, sql, {
      hooks: {
        async fenced() {
          chat = gw.openai(key).chat.completions.create({ model: "standin/echo", messages: [{ role: "user", content: "hi" }] });
          // A rebuild of a large ledger (or on a loaded machine) keeps the fences closed past the reserve's deadline.
          expect(await until(async () => ledger.fence.waiting, 5_000)).toBe(true);
          await Bun.sleep(2_500);
        },
      },
    });
    const answer = await chat;
    expect(answer.usage?.prompt_tokens).toBeGreaterThan(0);
    const charge = expectedCharge(answer.usage!.prompt_tokens, answer.usage!.completion_tokens);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000 - charge, locked: 0 });
  });
});

describe("the rebuild lock", () => {
  test("is renewed while the rebuild works past its lifetime, and is gone after", async () => {
    const { ledger, sql } = gw.services;
    await rebuildLedger(ledger, sql, {
      lockTtlMs: 300,
      hooks: {
        async fenced() {
          const token = await gw.services.redis.get(ledger.names.rebuildLock);
          expect(token).toBeString();
          await Bun.sleep(1_000); // three lifetimes: only renewal keeps it
          expect(await gw.services.redis.get(ledger.names.rebuildLock)).toBe(token);
          expect(await RebuildLock.tryAcquire(ledger)).toBeNull();
        },
      },
    });
    expect(await gw.services.redis.exists(ledger.names.rebuildLock)).toBe(0);
  });

  test("a rebuilder that lost its lock stops before opening the fences and cannot release the new owner's lock", async () => {
    const { ledger, sql } = gw.services;
    const { wallet } = await gw.newWallet(1);
    const rebuild = rebuildLedger(ledger, sql, {
      lockTtlMs: 300,
      hooks: {
        async fenced() {
          // Its lifetime ran out (a long pause) and another process took the lock.
          await gw.services.redis.set(ledger.names.rebuildLock, "intruder");
          await Bun.sleep(250); // the next renewal finds it
        },
      },
    });
    await expect(rebuild).rejects.toBeInstanceOf(RebuildLockLost);
    expect(errors.take(/"the ledger rebuild lock was taken over/)).toHaveLength(1);
    expect(await gw.services.redis.get(ledger.names.rebuildLock)).toBe("intruder");
    expect(await fences()).toEqual((await fences()).map(() => expect.stringMatching(/^R:\d+$/)));

    // A credit meanwhile waits; once the intruder's lock is gone, the rebuild is redone and the credit applies.
    const grant = gw.grant(wallet, 1_234);
    await gw.services.redis.del(ledger.names.rebuildLock);
    await grant;
    expect(await ensureLedger(ledger, sql)).toBe("ready");
    expect(await fences()).toEqual((await fences()).map(() => expect.stringMatching(/^\d+$/)));
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_001_234, locked: 0 });
  });
});

describe("a rebuild that stalled past its lock", () => {
  test("a lock not renewed within its lifetime (the process paused, its timer never ran) counts as lost", async () => {
    const lock = (await RebuildLock.tryAcquire(gw.services.ledger, 200))!;
    try {
      lock.assertHeld();
      Bun.sleepSync(300); // a stall of the whole process: no renewal can run, and none was confirmed
      expect(() => lock.assertHeld()).toThrow(RebuildLockLost);
      expect(errors.take(/"the ledger rebuild lock was not renewed/)).toHaveLength(1);
    } finally {
      await lock.release();
    }
  });

  test("writes nothing over the rebuild that replaced it: the charge made since stays, and the stale rebuild fails", async () => {
    const { ledger, sql } = gw.services;
    const { wallet, keyId } = await gw.newWallet(1);
    const p = ledger.principal(keyId, wallet);
    const k = ledger.names;
    let replacedBy = "";
    const stale = rebuildLedger(ledger, sql, {
      hooks: {
        async snapshotTaken() {
          // Stalled past its lifetime (its timer did not run, so it has not noticed): the lock is gone.
          await gw.services.redis.del(k.rebuildLock);
          // A gateway finds the fences closed with nobody holding the lock and rebuilds; it opens the fences.
          expect(await ensureLedger(ledger, sql)).toBe("rebuilt");
          replacedBy = (await gw.services.redis.get(k.fence(p.shard)))!;
          expect(replacedBy).toMatch(/^\d+$/);
          const hold = crypto.randomUUID();
          await ledger.reserve(p, hold, 300_000);
          expect(await ledger.settle(p, hold, 300_000, { promptTokens: 1, completionTokens: 1, costMicro: 1, model: "standin/echo" })).toBe(
            true,
          );
          expect(await gw.ledgerState(wallet)).toEqual({ balance: 700_000, locked: 0 });
        },
      },
    });
    await expect(stale).rejects.toBeInstanceOf(RebuildLockLost);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 700_000, locked: 0 });
    expect(await fences()).toEqual((await fences()).map(() => replacedBy));
    expect(ledger.fence.epoch(p.shard)).toBe(replacedBy);
    // The applied credit ids survived too, so the reconciler applies nothing a second time.
    const [grant] = await sql<{ event_id: string }[]>`SELECT event_id FROM credits WHERE wallet = ${wallet}`;
    expect(await gw.services.redis.hget(k.credited(p.shard), grant!.event_id)).toBe("1000000");
    expect((await reconcileFromPostgres(ledger, sql, { allCredits: true })).credits).toBe(0);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 700_000, locked: 0 });
  });
});

// A child process cannot reach an in-memory PGlite: the race needs the machine's Postgres (scripts/test.sh).
describe.skipIf(!process.env.TEST_DATABASE_URL)("two gateway processes and an admin command racing a rebuild", () => {
  let child: ChildGateway | undefined;
  afterAll(() => {
    child?.proc.kill("SIGKILL"); // only after a failure: the test stops it gracefully itself
  });

  test("credits and charges through both processes, before and after the snapshot, land exactly once", async () => {
    child = await startChildGateway(gw.sharedEnv());
    const { account, wallet, key } = await gw.newWallet(1);
    const codes = [`rdm-race-a-${crypto.randomUUID()}`, `rdm-race-b-${crypto.randomUUID()}`];
    await gw.services.sql`INSERT INTO redeem_codes (code_hash, amount_usdc, batch) VALUES
      (${hashRedeemCode(codes[0]!)}, 500000, 'race'), (${hashRedeemCode(codes[1]!)}, 700000, 'race')`;
    const redeemViaChild = async (code: string) => {
      const res = await fetch(`${child!.url}/v1/auth/keys`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ ...(await gw.signIn(account)), label: "redeemed", redeem_code: code }),
      });
      return { status: res.status, body: (await res.json()) as { redeemed_credit_usdc?: number } };
    };
    const chatVia = (client: OpenAI) =>
      client.chat.completions.create({ model: "standin/echo", messages: [{ role: "user", content: "hi" }] });
    const viaChild = new OpenAI({ apiKey: key, baseURL: `${child.url}/v1`, maxRetries: 0 });
    const grantA = (id: string, amount: number) =>
      gw.services.credits.add({ eventId: id, wallet, kind: "grant", amountUsdc: amount, reason: "race" });

    const g1 = `grant:race-1-${crypto.randomUUID()}`;
    const g2 = `grant:race-2-${crypto.randomUUID()}`;
    const adminId = `race-admin-${crypto.randomUUID()}`;
    let admin!: ReturnType<typeof spawnMain>;
    const during: Promise<unknown>[] = [];
    await rebuildLedger(gw.services.ledger, gw.services.sql, {
      hooks: {
        async fenced() {
          // Committed before the snapshot; their Redis halves are fenced and must not apply a second time.
          during.push(redeemViaChild(codes[0]!), grantA(g1, 300_000), chatVia(viaChild));
          admin = spawnMain(["admin", "grant", wallet, "0.25", "--reason", "race", "--id", adminId], {
            ...gw.sharedEnv(),
            LOG_LEVEL: "info",
          });
          await Promise.all([committed(`redeem:${hashRedeemCode(codes[0]!)}`), committed(g1)]);
          // The admin command waits for the rebuild before it touches the ledger.
          await admin.waitFor(/waiting for another process to rebuild the ledger/);
        },
        async snapshotTaken() {
          // Committed after the snapshot: not in it, applied by their own fenced credit-3 once the fences open.
          during.push(redeemViaChild(codes[1]!), grantA(g2, 110_000), chatVia(gw.openai(key)));
          await Promise.all([committed(`redeem:${hashRedeemCode(codes[1]!)}`), committed(g2)]);
        },
      },
    });
    const [r1, , chat1, r2, , chat2] = (await Promise.all(during)) as [
      Awaited<ReturnType<typeof redeemViaChild>>,
      unknown,
      OpenAI.ChatCompletion,
      Awaited<ReturnType<typeof redeemViaChild>>,
      unknown,
      OpenAI.ChatCompletion,
    ];
    expect([r1.status, r1.body.redeemed_credit_usdc, r2.status, r2.body.redeemed_credit_usdc]).toEqual([201, 500_000, 201, 700_000]);
    const out = await admin.done;
    expect(out.code).toBe(0);
    expect(out.stdout).toContain(`granted 0.250000 USD to ${wallet}`);
    // The child adopted the new epoch and serves on.
    const chat3 = await chatVia(viaChild);

    // The child answers once a settle is queued on its own connection; its shutdown waits for them (and drains its
    // outbox into Postgres), so both stores are read after it.
    expect(await child.stop()).toBe(0);
    child = undefined;
    const charges = [chat1, chat2, chat3].map((c) => expectedCharge(c.usage!.prompt_tokens, c.usage!.completion_tokens));
    const expected = 1_000_000 + 500_000 + 300_000 + 250_000 + 700_000 + 110_000 - charges.reduce((a, b) => a + b, 0);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: expected, locked: 0 });

    // Every credit once in Postgres, applied, and once in Redis's applied-credit ids.
    const rows = await gw.services.sql<{ event_id: string; amount_usdc: number; applied: boolean }[]>`
      SELECT event_id, amount_usdc, applied_at IS NOT NULL AS applied FROM credits WHERE wallet = ${wallet} ORDER BY id`;
    expect(rows).toHaveLength(6);
    expect(rows.every((r) => r.applied)).toBe(true);
    const k = gw.services.ledger.names;
    const credited = await gw.services.redis.hgetall(k.credited(k.shardOf(wallet)));
    for (const r of rows) expect(credited[r.event_id]).toBe(String(r.amount_usdc));

    // Both processes' outboxes in Postgres: the books agree to the µUSDC.
    await gw.services.flusher.drain();
    const [n] = await gw.services.sql<
      { n: number }[]
    >`SELECT COUNT(*)::int AS n FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge'`;
    expect(n!.n).toBe(3);
    expect(await postgresBalance(wallet)).toBe(expected);
  }, 120_000);
});
