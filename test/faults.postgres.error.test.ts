/**
 * Postgres down: the endpoints that read or write it answer 503 SERVICE_UNAVAILABLE at once (no connect backoff,
 * no reconnect stall), answer normally within a second of its return, and a shutdown is not held up by it.
 * Real Postgres (or PGlite) behind a forwarder the test closes and reopens (helpers/forwarder.ts).
 */
import { describe, expect, test } from "bun:test";
import { sharedGateway } from "./helpers/gateway.ts";

const gw = sharedGateway({}, { forwardPostgres: true });

const UNAVAILABLE = { error: "SERVICE_UNAVAILABLE", message: expect.any(String) };

describe("Postgres down", () => {
  test("usage, key listing, key creation and top-up history answer 503 at once; normal answers within 1 s of its return", async () => {
    const { account, wallet, key } = await gw.newWallet(1);
    const apiKey = { authorization: `Bearer ${key}` };
    const listing = async () => gw.call("GET", `/v1/auth/keys?${new URLSearchParams(await gw.signIn(account))}`);
    const requests = {
      usage: () => gw.call("GET", `/v1/usage/${wallet}`, undefined, apiKey),
      listing,
      creation: async () => gw.call("POST", "/v1/auth/keys", { ...(await gw.signIn(account)), label: "during outage" }),
      history: () => gw.call("GET", `/v1/topups/${wallet}`, undefined, apiKey),
    };
    expect((await requests.usage()).status).toBe(200);
    expect((await listing()).body.data).toHaveLength(1);

    await gw.pgForwarder!.down();
    let reopened = 0;
    try {
      for (let round = 0; round < 3; round++) {
        for (const [name, request] of Object.entries(requests)) {
          const started = Date.now();
          const res = await request();
          expect({ name, status: res.status, body: res.body }).toEqual({ name, status: 503, body: UNAVAILABLE });
          expect(Date.now() - started).toBeLessThan(500);
        }
      }
      // Balance and chat do not need Postgres.
      expect((await gw.call("GET", `/v1/balance/${wallet}`)).status).toBe(200);
      expect((await gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages: [{ role: "user", content: "hi" }] }, apiKey)).status).toBe(200);
      // Background work keeps trying meanwhile (the flusher every 200 ms): each failed connect used to lengthen
      // postgres.js' reconnect backoff, up to 20 s, which then held requests back after Postgres returned.
      for (let i = 0; i < 40; i++) await expect(gw.services.flusher.flushOnce()).rejects.toThrow();
    } finally {
      gw.pgForwarder!.up();
      reopened = Date.now();
    }
    // Recovery time is what is measured here: each try is a real request.
    let usage = await requests.usage();
    while (usage.status !== 200 && Date.now() - reopened < 1_000) {
      await Bun.sleep(20);
      usage = await requests.usage();
    }
    expect(usage.status).toBe(200);
    expect(Date.now() - reopened).toBeLessThan(1_000);
    const list = await listing();
    expect(list.status).toBe(200);
    expect(list.body.data).toHaveLength(1); // the creation during the outage wrote nothing
    expect((await requests.history()).status).toBe(200);
  });

  test("a shutdown with Postgres down is not held up: the outbox stays in Redis for the next start", async () => {
    const { key } = await gw.newWallet(1);
    const res = await gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages: [{ role: "user", content: "hi" }] }, { authorization: `Bearer ${key}` });
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
  });
});
