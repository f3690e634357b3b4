/**
 * Permit2 payments that must not credit (terms changed after signing, a bad signature, an x402 v1 envelope), and
 * one whose settlement outcome is unknown when the gateway answers: recovery credits it from its transaction,
 * once. Local anvil chain with Permit2 and x402's proxy, the in-process facilitator, a stock `@x402/evm` client.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { PrivateKeyAccount } from "viem/accounts";
import { startChain, type DevChain } from "./helpers/chain.ts";
import { startForwarder, type Forwarder } from "./helpers/forwarder.ts";
import { startGateway, type TestGateway } from "./helpers/gateway.ts";
import { captureErrors } from "./helpers/logs.ts";
import { capturePayment, decode, encode, v2StockUsdtFetch } from "./helpers/x402.ts";

let chain: DevChain;
let gw: TestGateway;
let quick: TestGateway;
let rpc: Forwarder;
let lossy: TestGateway;

beforeAll(async () => {
  chain = await startChain();
  gw = await startGateway(chain.gatewayEnv());
  // Gives up waiting for a settlement receipt after 1 s (the facilitator's bound on each call).
  quick = await startGateway({ ...chain.gatewayEnv(), FACILITATOR_TIMEOUT_MS: "1000" });
  // Reaches the chain through a forwarder that can lose the answer to one RPC call.
  const { hostname, port } = new URL(chain.rpcUrl);
  rpc = startForwarder({ hostname, port: Number(port) });
  lossy = await startGateway({ ...chain.gatewayEnv(), RPC_URL: `http://${hostname}:${(rpc.address as { port: number }).port}` });
}, 60_000);

afterAll(async () => {
  for (const g of [gw, quick, lossy]) await g?.close();
  await rpc?.stop();
  await chain?.stop();
});

const topup = (g: TestGateway, amount: number, headers: Record<string, string>) => g.call("POST", "/v1/topup", { amount }, headers);

async function stockPayment(g: TestGateway, payer: PrivateKeyAccount, amount: number) {
  const p = await capturePayment(g.fetch, (f) => v2StockUsdtFetch(f, chain, payer), amount);
  return decode(p.value);
}

async function usdt(payer: PrivateKeyAccount) {
  return { payer: await chain.balanceOf(chain.usdt.address, payer.address), payTo: await chain.balanceOf(chain.usdt.address, chain.payTo) };
}

async function credits(g: TestGateway, wallet: string) {
  return [
    ...(await g.services.sql<{ amount_usdc: number; tx_hash: string }[]>`
      SELECT amount_usdc, tx_hash FROM credits WHERE wallet = ${wallet} AND kind = 'topup' ORDER BY id`),
  ];
}

describe("a Permit2 payment that does not match what it says credits nothing", () => {
  test.each([
    ["the recipient", (a: Record<string, any>) => (a.witness.to = "0x000000000000000000000000000000000000dEaD"), "payTo"],
    ["the amount", (a: Record<string, any>) => (a.permitted.amount = "1"), "amount"],
    ["the token", (a: Record<string, any>) => (a.permitted.token = chain.usdc.address), "asset"],
    ["the spender", (a: Record<string, any>) => (a.spender = chain.relayer), "spender"],
  ])("%s changed after signing: 400 mismatched, nothing moves", async (_what, tamper, field) => {
    const payer = await chain.newPayer();
    const payment = await stockPayment(gw, payer, 2);
    tamper(payment.payload.permit2Authorization);
    const before = await usdt(payer);
    const res = await topup(gw, 2, { "payment-signature": encode(payment) });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: `mismatched payment: ${field}` });
    expect(await usdt(payer)).toEqual(before);
    expect(await gw.ledgerState(payer.address.toLowerCase())).toEqual({ balance: 0, locked: 0 });
  });

  test("a signature by another key: 402 invalid_permit2_signature, nothing moves", async () => {
    const payer = await chain.newPayer();
    const other = await chain.newPayer();
    const payment = await stockPayment(gw, payer, 2);
    payment.payload.signature = (await stockPayment(gw, other, 2)).payload.signature;
    const before = await usdt(payer);
    const res = await topup(gw, 2, { "payment-signature": encode(payment) });
    expect(res.status).toBe(402);
    expect(res.body.error).toBe("invalid_permit2_signature");
    expect(await usdt(payer)).toEqual(before);
    expect(await gw.ledgerState(payer.address.toLowerCase())).toEqual({ balance: 0, locked: 0 });
  });

  test("a Permit2 payload in an x402 v1 envelope: 400, v1 has no Permit2 terms", async () => {
    const payer = await chain.newPayer();
    const payment = await stockPayment(gw, payer, 2);
    const v1 = { x402Version: 1, scheme: "exact", network: "base-sepolia", payload: payment.payload };
    const res = await topup(gw, 2, { "x-payment": encode(v1) });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "mismatched payment: no offered asset is paid by permit2" });
  });
});

const errors = captureErrors(/"payment facilitator unavailable"/);

describe("a Permit2 settlement whose outcome the gateway does not learn", () => {
  test("the answer to its broadcast is lost: the check names the transaction signed before sending; recovery credits it once", async () => {
    const payer = await chain.newPayer();
    const wallet = payer.address.toLowerCase();
    const payment = await stockPayment(lossy, payer, 2);
    const before = await usdt(payer);
    rpc.loseNextReply("eth_sendRawTransaction");
    const res = await topup(lossy, 2, { "payment-signature": encode(payment) });
    expect(res.status).toBe(503);
    expect(res.body).toEqual({ error: "payment facilitator unavailable" });
    expect(errors.take(/"payment facilitator unavailable"/).map((l) => (l.error as { message: string }).message)).toEqual([
      expect.stringContaining("HTTP request failed"),
    ]);
    expect(await lossy.ledgerState(wallet)).toEqual({ balance: 0, locked: 0 });
    const after = await usdt(payer);
    expect(before.payer - after.payer).toBe(2_000_000n); // the transfer landed
    const [check] = await lossy.services.sql<{ state: string; tx_hash: string | null }[]>`
      SELECT state, tx_hash FROM payment_checks WHERE payer = ${wallet}`;
    expect(check!.state).toBe("pending");
    const receipt = await chain.rpc("eth_getTransactionReceipt", [check!.tx_hash]);
    expect(receipt).toMatchObject({ status: "0x1" });

    expect(await lossy.services.topup.recovery.checkPending()).toBe(1);
    expect(await lossy.ledgerState(wallet)).toEqual({ balance: 2_000_000, locked: 0 });
    expect(await credits(lossy, wallet)).toEqual([{ amount_usdc: 2_000_000, tx_hash: check!.tx_hash! }]);
    expect(await lossy.services.topup.recovery.checkPending()).toBe(0);
  }, 30_000);

  test("402 settlement_pending and a check on its transaction; once mined, recovery credits it exactly once", async () => {
    const payer = await chain.newPayer();
    const wallet = payer.address.toLowerCase();
    const payment = await stockPayment(quick, payer, 3);
    const before = await usdt(payer);
    await chain.rpc("evm_setAutomine", [false]);
    let res;
    try {
      res = await topup(quick, 3, { "payment-signature": encode(payment) });
      expect(await quick.services.topup.recovery.checkPending()).toBe(0); // not mined: still pending
    } finally {
      await chain.rpc("evm_mine", []);
      await chain.rpc("evm_setAutomine", [true]);
    }
    expect(res.status).toBe(402);
    expect(res.body.error).toBe("settlement_pending");
    const [check] = await quick.services.sql<{ state: string; method: string; tx_hash: string }[]>`
      SELECT state, method, tx_hash FROM payment_checks WHERE payer = ${wallet}`;
    expect(check).toMatchObject({ state: "pending", method: "permit" });
    expect(check!.tx_hash).toMatch(/^0x[0-9a-f]{64}$/);
    expect(await quick.ledgerState(wallet)).toEqual({ balance: 0, locked: 0 });

    expect(await quick.services.topup.recovery.checkPending()).toBe(1);
    const after = await usdt(payer);
    expect(before.payer - after.payer).toBe(3_000_000n);
    expect(after.payTo - before.payTo).toBe(3_000_000n);
    expect(await quick.ledgerState(wallet)).toEqual({ balance: 3_000_000, locked: 0 });
    expect(await credits(quick, wallet)).toEqual([{ amount_usdc: 3_000_000, tx_hash: check!.tx_hash }]);

    // Checking again and replaying the payment change nothing.
    expect(await quick.services.topup.recovery.checkPending()).toBe(0);
    const replay = await topup(quick, 3, { "payment-signature": encode(payment) });
    expect(replay.status).toBe(402);
    expect(await quick.ledgerState(wallet)).toEqual({ balance: 3_000_000, locked: 0 });
    expect(await credits(quick, wallet)).toHaveLength(1);
    expect(await usdt(payer)).toEqual(after);
  }, 30_000);
});
