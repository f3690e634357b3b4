/**
 * Postgres down: the endpoints that read or write it answer 503 SERVICE_UNAVAILABLE at once (no connect backoff,
 * no reconnect stall), answer normally within a second of its return, and a shutdown is not held up by it. Under
 * read and chat load, with the flusher's backlog draining and a repair round at the return, every read answers
 * normally and fast from 3 s after the return, whether Postgres refused connections or did not answer them (a
 * connection that was closed under a query used to stay broken, each later use of it waiting out the connect
 * timeout: patches/postgres@3.4.9.patch; PgHealth's probe waited out the pool's connect timeout; a read that
 * waited through the outage marked Postgres down again after its return).
 * Real Postgres (or PGlite) behind a forwarder the test closes, stalls and reopens (helpers/forwarder.ts).
 */
import { describe, expect, test } from "bun:test";
import { sharedGateway } from "./helpers/gateway.ts";
import { CHARGE } from "./helpers/ledgerTraffic.ts";
import { captureErrors } from "./helpers/logs.ts";

// The chat load that fills the outbox during an outage is far above a key's default rate limit.
const gw = sharedGateway({ RATE_LIMIT_REQUESTS: "1000000" }, { forwardPostgres: true });

const UNREACHABLE = /"Postgres unreachable; Postgres-backed requests answer 503 until it returns"/;
const FLUSH_FAILED = /"flusher round failed; it will retry"/;
const REPAIR_FAILED = /"repair job failed; it will retry"/;
const DRAIN_FAILED = /"final outbox drain failed; entries stay in Redis"/;
const errors = captureErrors(UNREACHABLE, FLUSH_FAILED, REPAIR_FAILED, DRAIN_FAILED);

// The flusher's batch (store/flusher.ts): an outage that leaves more behind is drained in back-to-back batches.
const FLUSHER_BATCH = 500;

const UNAVAILABLE = { error: "SERVICE_UNAVAILABLE", message: expect.any(String) };

describe("Postgres down", () => {
  test("usage, key listing, key creation and top-up history answer 503 at once; normal answers within 1 s of its return", async () => {
    const { account, wallet, key } = await gw.newWallet(1);
    const apiKey = { authorization: `Bearer ${key}` };
    const listing = async () => gw.call("GET", `/v1/auth/keys?${new URLSearchParams(await gw.signIn(account))}`);
    // Each one signed first (the test's own signing is no part of the gateway's answer time), then sent.
    const requests = {
      usage: async () => () => gw.call("GET", `/v1/usage/${wallet}`, undefined, apiKey),
      listing: async () => {
        const query = new URLSearchParams(await gw.signIn(account));
        return () => gw.call("GET", `/v1/auth/keys?${query}`);
      },
      creation: async () => {
        const body = { ...(await gw.signIn(account)), label: "during outage" };
        return () => gw.call("POST", "/v1/auth/keys", body);
      },
      history: async () => () => gw.call("GET", `/v1/topups/${wallet}`, undefined, apiKey),
    };
    const send = async (request: () => Promise<() => ReturnType<typeof gw.call>>) => (await request())();
    expect((await send(requests.usage)).status).toBe(200);
    expect((await listing()).body.data).toHaveLength(1);

    await gw.pgForwarder!.down();
    let reopened = 0;
    try {
      for (let round = 0; round < 3; round++) {
        for (const [name, request] of Object.entries(requests)) {
          const signed = await request();
          const started = Date.now();
          const res = await signed();
          expect({ name, status: res.status, body: res.body }).toEqual({ name, status: 503, body: UNAVAILABLE });
          expect(Date.now() - started).toBeLessThan(500);
        }
      }
      // Balance and chat do not need Postgres.
      expect((await gw.call("GET", `/v1/balance/${wallet}`)).status).toBe(200);
      expect(
        (await gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages: [{ role: "user", content: "hi" }] }, apiKey))
          .status,
      ).toBe(200);
      // Background work keeps trying meanwhile (the flusher every 200 ms): each failed connect used to lengthen
      // postgres.js' reconnect backoff, up to 20 s, which then held requests back after Postgres returned.
      for (let i = 0; i < 40; i++) await expect(gw.services.flusher.flushOnce()).rejects.toThrow();
    } finally {
      gw.pgForwarder!.up();
      reopened = Date.now();
    }
    // Recovery time is what is measured here: each try is a real request.
    let usage = await send(requests.usage);
    while (usage.status !== 200 && Date.now() - reopened < 1_000) {
      await Bun.sleep(20);
      usage = await send(requests.usage);
    }
    expect(usage.status).toBe(200);
    expect(Date.now() - reopened).toBeLessThan(1_000);
    const list = await listing();
    expect(list.status).toBe(200);
    expect(list.body.data).toHaveLength(1); // the creation during the outage wrote nothing
    expect((await send(requests.history)).status).toBe(200);
    // One log line for the outage, not one per refused request.
    expect(errors.take(UNREACHABLE)).toHaveLength(1);
  });

  // Refused: Postgres stopped (its port closed). Not answering: a frozen host or a network cut, where a connect
  // waits out its connect timeout; it comes back just after a connect (the probe's, a read's, the flusher's) began to
  // wait, the worst moment for that one.
  const afterAConnectBeganToWait = async () => {
    const seen = gw.pgForwarder!.stalledConnects;
    while (gw.pgForwarder!.stalledConnects === seen) await Bun.sleep(5);
  };
  test.each([
    ["refused", () => gw.pgForwarder!.down(), async () => {}],
    ["not answering", () => gw.pgForwarder!.stall(), afterAConnectBeganToWait],
  ] as const)(
    "Postgres away (%s) under load and a flusher backlog: every read answers 200 quickly from 3 s after it accepts connections again",
    async (_mode, takeAway, beforeReturn) => {
      // A reader wallet whose answers do not change during the test (its usage, top-up history, daily spend), and a
      // busy wallet whose chats fill the outbox while Postgres is away, so the flusher has a backlog at the return.
      const reader = await gw.newWallet(1);
      const readerKey = { authorization: `Bearer ${reader.key}` };
      await gw.services.credits.add({
        eventId: `topup:${crypto.randomUUID()}`,
        wallet: reader.wallet,
        kind: "topup",
        amountUsdc: 2_000_000,
        txHash: `0x${crypto.randomUUID().replaceAll("-", "")}${crypto.randomUUID().replaceAll("-", "")}`,
        network: "base",
      });
      for (let i = 0; i < 3; i++)
        expect(
          (await gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages: [{ role: "user", content: "hi" }] }, readerKey))
            .status,
        ).toBe(200);
      await gw.services.chat.idle();
      await gw.services.flusher.drain();
      const busy = await gw.newWallet(100);
      const busyKey = { authorization: `Bearer ${busy.key}` };

      const reads = {
        usage: () => gw.call("GET", `/v1/usage/${reader.wallet}`, undefined, readerKey),
        history: () => gw.call("GET", `/v1/topups/${reader.wallet}`, undefined, readerKey),
        daily: () => gw.call("GET", `/v1/usage/${reader.wallet}/daily?days=3`, undefined, readerKey),
      };
      type Read = keyof typeof reads;
      // The days a charge fell on (dates move at midnight; the charges do not).
      const comparable = (name: Read, body: any) =>
        name === "daily" ? { ...body, from: undefined, to: undefined, days: body.days.filter((d: any) => d.keys.length > 0) } : body;
      const expected = {} as Record<Read, unknown>;
      for (const [name, read] of Object.entries(reads) as [Read, () => ReturnType<typeof gw.call>][]) {
        const res = await read();
        expect(res.status).toBe(200);
        expected[name] = comparable(name, res.body);
      }
      expect((expected.history as any).topups).toHaveLength(1);
      expect((expected.daily as any).days).toHaveLength(1);

      type Answer = { name: Read; sent: number; ms: number; status: number; body: any; retryAfter: string | null };
      const answers: Answer[] = [];
      const chats: number[] = [];
      let stop = false;
      const readLoop = async (offset: number) => {
        const names = Object.keys(reads) as Read[];
        for (let i = offset; !stop; i++) {
          const name = names[i % names.length]!;
          const sent = Date.now();
          const res = await reads[name]();
          answers.push({
            name,
            sent,
            ms: Date.now() - sent,
            status: res.status,
            body: res.body,
            retryAfter: res.headers.get("retry-after"),
          });
          await Bun.sleep(5 + offset * 2); // pacing: clients reading now and then, not in step, not a flood
        }
      };
      const chatLoop = async () => {
        while (!stop) {
          const res = await gw.call(
            "POST",
            "/v1/chat/completions",
            { model: "standin/echo", messages: [{ role: "user", content: "hi" }] },
            busyKey,
          );
          chats.push(res.status);
        }
      };

      gw.services.flusher.start();
      const load = [0, 1, 2, 3, 4, 5].map(readLoop).concat([chatLoop(), chatLoop()]);
      let wentDown = 0;
      let reopened = 0;
      const chatsBefore = chats.length;
      try {
        await takeAway();
        wentDown = Date.now();
        // Away long enough for every pooled connection to fail, for readers to be refused (a host that does not answer
        // first holds the reads in flight for the connect timeout) and for the outbox to hold two flusher batches.
        const refused = () => answers.filter((a) => a.sent >= wentDown && a.status === 503).length;
        while (Date.now() - wentDown < 4_000 || refused() < 20 || chats.length - chatsBefore < 2 * FLUSHER_BATCH) await Bun.sleep(100);
        await beforeReturn();
        gw.pgForwarder!.up();
        reopened = Date.now();
        // A repair round may well start at the return too (every 30 s in production): it competes for the pool.
        const repair = gw.services.repairNow();
        while (Date.now() - reopened < 6_000) await Bun.sleep(100);
        await repair;
      } finally {
        gw.pgForwarder!.up();
        stop = true;
        await Promise.all(load);
        await gw.services.flusher.stop();
      }

      // Never a 500: not when it goes, not while away, not in the first moments of the return.
      const neither = answers
        .filter((a) => a.status !== 200 && a.status !== 503)
        .map((a) => ({ name: a.name, at: a.sent - reopened, status: a.status, body: a.body }));
      expect(neither).toEqual([]);
      const down = answers.filter((a) => a.sent >= wentDown && a.sent + a.ms < reopened);
      expect(down.length).toBeGreaterThanOrEqual(20);
      for (const a of down)
        expect({ name: a.name, status: a.status, body: a.body, retryAfter: a.retryAfter }).toEqual({
          name: a.name,
          status: 503,
          body: UNAVAILABLE,
          retryAfter: "1",
        });
      const after = answers.filter((a) => a.sent >= reopened);
      const settled = after.filter((a) => a.sent - reopened >= 3_000);
      expect(settled.length).toBeGreaterThan(30);
      // Every late answer listed that is not a fast 200 with the right body (so a failure shows them all).
      const wrong = settled
        .filter((a) => a.status !== 200 || a.ms >= 1_000 || !Bun.deepEquals(comparable(a.name, a.body), expected[a.name]))
        .map((a) => ({ name: a.name, at: a.sent - reopened, ms: a.ms, status: a.status, body: a.body }));
      expect(wrong).toEqual([]);
      // Chat never needed Postgres, each one charged exactly once, and the backlog it left reaches Postgres.
      expect(chats.filter((s) => s !== 200)).toEqual([]);
      await gw.services.chat.idle();
      expect(await gw.ledgerState(busy.wallet)).toEqual({ balance: 100_000_000 - chats.length * CHARGE, locked: 0 });
      await gw.services.flusher.drain();
      const [charges] = await gw.services.sql<
        { n: number }[]
      >`SELECT count(*)::int AS n FROM ledger_events WHERE wallet = ${busy.wallet} AND type = 'charge'`;
      expect(charges!.n).toBe(chats.length);
      // The outage was logged as an error once (PgHealth); the flusher's failed rounds meanwhile are a warning, not an
      // error per round (a repair round at the return may have been refused too).
      expect(errors.take(UNREACHABLE).length).toBeGreaterThan(0);
      expect(errors.take(FLUSH_FAILED)).toEqual([]);
      errors.take(REPAIR_FAILED);
    },
    30_000,
  );

  test("a host that stops answering is seen back within 3 s of its return, even when it returns just after the probe's connect began to wait", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const usage = () => gw.call("GET", `/v1/usage/${wallet}`, undefined, { authorization: `Bearer ${key}` });
    expect((await usage()).status).toBe(200);
    let reopened = 0;
    try {
      await gw.pgForwarder!.stall();
      // What the app's error handler does with a request's outage (a read here would first wait out its connect).
      gw.services.pgHealth.markDown(new Error("Postgres does not answer"));
      expect(await usage()).toEqual({ status: 503, body: UNAVAILABLE, headers: expect.anything() });
      // Nothing else connects in this test: the next connect is the probe's.
      const seen = gw.pgForwarder!.stalledConnects;
      while (gw.pgForwarder!.stalledConnects === seen) await Bun.sleep(5);
    } finally {
      gw.pgForwarder!.up();
      reopened = Date.now();
    }
    let res = await usage();
    while (res.status === 503 && Date.now() - reopened < 6_000) {
      await Bun.sleep(20);
      res = await usage();
    }
    expect(res.status).toBe(200);
    // The probe's own connect gives up after 1 s; one through the pool waited its 5 s connect timeout.
    expect(Date.now() - reopened).toBeLessThan(3_000);
    expect(errors.take(UNREACHABLE)).toHaveLength(1);
  }, 15_000);

  test("a read whose connect waited through the outage fails after the return without marking Postgres down again", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const usage = () => gw.call("GET", `/v1/usage/${wallet}`, undefined, { authorization: `Bearer ${key}` });
    let stale: ReturnType<typeof usage>;
    try {
      await gw.pgForwarder!.stall();
      const seen = gw.pgForwarder!.stalledConnects;
      stale = usage();
      // Its connect waits (until the pool's 5 s connect timeout); another request saw the outage meanwhile.
      while (gw.pgForwarder!.stalledConnects === seen) await Bun.sleep(5);
      gw.services.pgHealth.markDown(new Error("Postgres does not answer"));
    } finally {
      gw.pgForwarder!.up();
    }
    while (gw.services.pgHealth.down) await Bun.sleep(20);
    expect(await stale).toEqual({ status: 503, body: UNAVAILABLE, headers: expect.anything() });
    // Postgres is back: the late failure of a request sent before it returned is no new outage.
    expect(gw.services.pgHealth.down).toBe(false);
    expect((await usage()).status).toBe(200);
    // The one outage line is the one reported during the outage: the late failure logged none.
    expect(errors.take(UNREACHABLE)).toHaveLength(1);
  }, 15_000);

  test("a shutdown with Postgres down is not held up: the outbox stays in Redis for the next start", async () => {
    const { key } = await gw.newWallet(1);
    const res = await gw.call(
      "POST",
      "/v1/chat/completions",
      { model: "standin/echo", messages: [{ role: "user", content: "hi" }] },
      { authorization: `Bearer ${key}` },
    );
    expect(res.status).toBe(200);
    await gw.pgForwarder!.down();
    const started = Date.now();
    await gw.services.close();
    expect(Date.now() - started).toBeLessThan(2_000);
    const ledger = gw.services.ledger;
    const { Redis } = await import("ioredis");
    const side = new Redis(gw.redisSocket);
    let left = 0;
    for (const shard of ledger.names.allShards()) left += await side.xlen(ledger.names.outbox(shard));
    side.disconnect();
    expect(left).toBeGreaterThan(0);
    expect(errors.take(DRAIN_FAILED)).toHaveLength(1);
  });
});
