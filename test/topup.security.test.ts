import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { PrivateKeyAccount } from "viem/accounts";
import { setLogLevel } from "../src/log.ts";
import { startChain, type DevChain } from "./helpers/chain.ts";
import { startGateway, type TestGateway } from "./helpers/gateway.ts";
import { capturePayment, v1Fetch, v2Fetch } from "./helpers/x402.ts";

let chain: DevChain;
let gw: TestGateway;

beforeAll(async () => {
  chain = await startChain();
  gw = await startGateway(chain.gatewayEnv());
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await chain?.stop();
});

const send = (amount: number, header: { name: string; value: string }) =>
  gw.call("POST", "/v1/topup", { amount }, { [header.name]: header.value });

async function moved(payer: PrivateKeyAccount, token: `0x${string}`) {
  return { payer: await chain.balanceOf(token, payer.address), payTo: await chain.balanceOf(token, chain.payTo) };
}

async function topupRows(wallet: string) {
  const rows = await gw.services.sql<
    { amount_usdc: number }[]
  >`SELECT amount_usdc FROM credits WHERE wallet = ${wallet} AND kind = 'topup'`;
  return rows.map((r) => ({ ...r }));
}

describe("a payment credits once", () => {
  test("the same X-Payment replayed sequentially: 200 once, then 402; one transfer, one credit", async () => {
    const payer = await chain.newPayer();
    const wallet = payer.address.toLowerCase();
    const payment = await capturePayment(gw.fetch, (f) => v1Fetch(f, chain, payer), 5);
    const before = await moved(payer, chain.usdc.address);
    const first = await send(5, payment);
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ balance_usdc: 5_000_000, credited_usdc: 5_000_000 });
    for (let i = 0; i < 2; i++) {
      const again = await send(5, payment);
      expect(again.status).toBe(402);
      expect(again.body.error).toMatch(/nonce|used|simulation/);
    }
    const after = await moved(payer, chain.usdc.address);
    expect(before.payer - after.payer).toBe(5_000_000n);
    expect(after.payTo - before.payTo).toBe(5_000_000n);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 5_000_000, locked: 0 });
    expect(await topupRows(wallet)).toEqual([{ amount_usdc: 5_000_000 }]);
  });

  test.each(["v1", "v2"] as const)(
    "the same %s payment sent 10 times concurrently: exactly one 200, one transfer, one credit",
    async (version) => {
      const payer = await chain.newPayer();
      const wallet = payer.address.toLowerCase();
      const payment = await capturePayment(gw.fetch, (f) => (version === "v1" ? v1Fetch : v2Fetch)(f, chain, payer), 3);
      const before = await moved(payer, chain.usdc.address);
      const results = await Promise.all(Array.from({ length: 10 }, () => send(3, payment)));
      const statuses = results.map((r) => r.status).sort();
      expect(statuses).toEqual([200, 402, 402, 402, 402, 402, 402, 402, 402, 402]);
      expect(results.find((r) => r.status === 200)!.body).toEqual({ balance_usdc: 3_000_000, credited_usdc: 3_000_000 });
      const after = await moved(payer, chain.usdc.address);
      expect(before.payer - after.payer).toBe(3_000_000n);
      expect(after.payTo - before.payTo).toBe(3_000_000n);
      expect(await gw.ledgerState(wallet)).toEqual({ balance: 3_000_000, locked: 0 });
      expect(await topupRows(wallet)).toEqual([{ amount_usdc: 3_000_000 }]);
    },
  );

  test("a USDT permit replayed (sequentially and concurrently) moves and credits once", async () => {
    const payer = await chain.newPayer();
    const wallet = payer.address.toLowerCase();
    const payment = await capturePayment(gw.fetch, (f) => v2Fetch(f, chain, payer, "USDT"), 2);
    const before = await moved(payer, chain.usdt.address);
    const results = await Promise.all(Array.from({ length: 5 }, () => send(2, payment)));
    expect(results.map((r) => r.status).sort()).toEqual([200, 402, 402, 402, 402]);
    const late = await send(2, payment);
    expect(late.status).toBe(402);
    expect(late.body.error).toBe("permit_nonce_used");
    const after = await moved(payer, chain.usdt.address);
    expect(before.payer - after.payer).toBe(2_000_000n);
    expect(after.payTo - before.payTo).toBe(2_000_000n);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 2_000_000, locked: 0 });
  });

  test("a settlement recorded twice (a facilitator that answers a retry with the same transaction) credits once", async () => {
    const payer = await chain.newPayer();
    const wallet = payer.address.toLowerCase();
    const tx = `0x${"ab".repeat(32)}`;
    const credit = { eventId: `topup:eip155:84532:${tx}`, wallet, kind: "topup" as const, amountUsdc: 1_000_000, txHash: tx };
    expect(await gw.services.credits.addSettled(credit)).toEqual({ balance: 1_000_000, duplicate: false, deferred: false });
    expect(await gw.services.credits.addSettled(credit)).toEqual({ balance: 1_000_000, duplicate: true, deferred: false });
    // Same transaction under another event id (another path to the same settlement): still once.
    expect((await gw.services.credits.addSettled({ ...credit, eventId: "topup:other" })).duplicate).toBe(true);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
  });
});

describe("GET /v1/topups is wallet-scoped and its secrets never reach a log", () => {
  test("another wallet's key, a revoked key, a bad key, a foreign SIWE message, no credentials: 401", async () => {
    const payer = await chain.newPayer();
    const other = await gw.newWallet(0);
    const mine = await gw.call("POST", "/v1/auth/keys", await gw.signIn(payer));
    const path = `/v1/topups/${payer.address}`;
    const cases: [string, Record<string, string>][] = [
      [path, { authorization: `Bearer ${other.key}` }],
      [`${path}?api_key=${other.key}`, {}],
      [`${path}?api_key=sk-nope`, {}],
      [path, {}],
    ];
    const { message, signature } = await gw.signIn(other.account);
    cases.push([`${path}?${new URLSearchParams({ message, signature })}`, {}]);
    for (const [p, h] of cases) {
      const res = await gw.call("GET", p, undefined, h);
      expect(res.status).toBe(401);
      expect(res.body.error).toBe("UNAUTHORIZED");
    }
    await gw.call("DELETE", `/v1/auth/keys/${mine.body.id}`, await gw.signIn(payer));
    const revoked = await gw.call("GET", `${path}?api_key=${mine.body.key}`);
    expect(revoked.status).toBe(401);
  });

  test("api_key and SIWE query values appear in no log line, even at debug level and on failures", async () => {
    const payer = await chain.newPayer();
    const key = await gw.call("POST", "/v1/auth/keys", await gw.signIn(payer));
    const { message, signature } = await gw.signIn(payer);
    const lines: string[] = [];
    const out = process.stdout.write.bind(process.stdout);
    const err = process.stderr.write.bind(process.stderr);
    process.stdout.write = ((s: string | Uint8Array) => (lines.push(String(s)), true)) as typeof process.stdout.write;
    process.stderr.write = ((s: string | Uint8Array) => (lines.push(String(s)), true)) as typeof process.stderr.write;
    setLogLevel("debug");
    try {
      const path = `/v1/topups/${payer.address}`;
      expect((await gw.call("GET", `${path}?api_key=${key.body.key}`)).status).toBe(200);
      expect((await gw.call("GET", `${path}?api_key=${key.body.key}x`)).status).toBe(401);
      expect((await gw.call("GET", `${path}?${new URLSearchParams({ message, signature })}`)).status).toBe(200);
      expect((await gw.call("GET", `${path}?${new URLSearchParams({ message: message + "x", signature })}`)).status).toBe(401);
      expect((await gw.call("GET", `/v1/topups/not-a-wallet?api_key=${key.body.key}&signature=${signature}`)).status).toBe(400);
    } finally {
      setLogLevel("error");
      process.stdout.write = out;
      process.stderr.write = err;
    }
    expect(lines.length).toBeGreaterThan(0); // the SIWE failures are logged (with their reason only)
    const all = lines.join("");
    expect(all).not.toContain(key.body.key.slice(3));
    expect(all).not.toContain(signature.slice(2, 40));
    expect(all).not.toContain(payer.address.slice(2) + "\n");
    expect(all).not.toContain(message.split("\n")[0]!);
  });
});
