/**
 * A settled payment that cannot be applied logs "grant it by hand" only when no repair job will apply it: if
 * Postgres has its row (or may have it), the repair job applies it and an operator granting too would credit twice.
 */
import { describe, expect, test } from "bun:test";
import { setLogLevel } from "../src/log.ts";
import { sharedGateway } from "./helpers/gateway.ts";

const gw = sharedGateway({}, { forwardRedis: true, forwardPostgres: true });

async function captureErrors(fn: () => Promise<unknown>): Promise<string> {
  const lines: string[] = [];
  const write = process.stderr.write;
  process.stderr.write = ((chunk: unknown) => (lines.push(String(chunk)), true)) as typeof process.stderr.write;
  setLogLevel("error");
  try {
    await fn().catch(() => {});
  } finally {
    process.stderr.write = write;
  }
  return lines.join("");
}

/** Takes Redis away and waits until both clients noticed (ioredis no longer ready, Bun's client disconnected). */
async function redisDown() {
  const closed = gw.services.redis.status === "ready" ? new Promise((r) => gw.services.redis.once("close", r)) : Promise.resolve();
  await gw.redisForwarder!.down();
  await closed;
  // Bun's client has no close event a test can wait on (the ledger owns its callbacks): its state is polled.
  for (let i = 0; i < 200 && gw.services.scripts.client.connected; i++) await Bun.sleep(5);
  expect(gw.services.scripts.client.connected).toBe(false);
}

async function redisUp() {
  gw.redisForwarder!.up();
  await gw.services.scripts.client.send("PING", []);
  await gw.services.redis.ping();
}

const credit = (wallet: string, n: number) => ({
  eventId: `topup:test:${wallet}:${n}`,
  wallet,
  kind: "topup" as const,
  amountUsdc: 2_000_000,
  txHash: `0x${String(n).padStart(64, "0")}`,
});

describe("a settled payment that cannot be applied", () => {
  test("Redis down, Postgres up: recorded, the repair job applies it once; no 'grant it by hand'", async () => {
    const wallet = "0x" + "11".repeat(20);
    await redisDown();
    let log: string;
    try {
      log = await captureErrors(() => gw.services.credits.addSettled(credit(wallet, 1)));
    } finally {
      await redisUp();
    }
    expect(log).toContain("the repair job applies it (do not grant it)");
    expect(log).not.toContain("grant it by hand");
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 0, locked: 0 });
    await gw.services.credits.reapplyPending();
    await gw.services.credits.reapplyPending();
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 2_000_000, locked: 0 });
  });

  test("Redis and Postgres both down before anything was sent: 'grant it by hand', and nothing exists to repair", async () => {
    const wallet = "0x" + "22".repeat(20);
    await gw.pgForwarder!.down();
    await redisDown();
    let log: string;
    try {
      log = await captureErrors(() => gw.services.credits.addSettled(credit(wallet, 2)));
    } finally {
      gw.pgForwarder!.up();
      await redisUp();
    }
    expect(log).toContain("SETTLED PAYMENT NOT CREDITED: grant it by hand");
    await gw.services.credits.reapplyPending();
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 0, locked: 0 });
    expect(await gw.services.sql`SELECT 1 FROM credits WHERE wallet = ${wallet}`).toHaveLength(0);
  });
});
