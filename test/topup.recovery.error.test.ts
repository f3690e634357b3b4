/**
 * A payment whose settlement the gateway could not confirm is not lost: the client hears 503 (or 402), a payment
 * check is opened, and the recovery job credits it once the chain shows the transfer, or voids it once the
 * authorization can no longer be used. Local anvil chain, x402's reference facilitator over HTTP.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { PrivateKeyAccount } from "viem/accounts";
import { startChain, type DevChain } from "./helpers/chain.ts";
import { startFacilitator, type FacilitatorServer } from "./helpers/facilitator.ts";
import { startGateway, type TestGateway } from "./helpers/gateway.ts";
import { capturePayment, v1Fetch, v2Fetch } from "./helpers/x402.ts";
import { captureErrors } from "./helpers/logs.ts";

let chain: DevChain;
let slow: FacilitatorServer;
let hanging: FacilitatorServer;
let viaSlow: TestGateway;
let viaHanging: TestGateway;
let local: TestGateway;

beforeAll(async () => {
  chain = await startChain();
  // Settles on chain at once, answers 3 s later: past the gateway's 1 s facilitator timeout.
  slow = await startFacilitator(chain, { settleDelayMs: 3_000 });
  // Verifies, then never settles and never answers /settle.
  hanging = await startFacilitator(chain, { settleHangs: true });
  viaSlow = await startGateway({ ...chain.gatewayEnv(), FACILITATOR: "http", FACILITATOR_URL: slow.url, FACILITATOR_TIMEOUT_MS: "1000" });
  viaHanging = await startGateway({
    ...chain.gatewayEnv(),
    FACILITATOR: "http",
    FACILITATOR_URL: hanging.url,
    FACILITATOR_TIMEOUT_MS: "1000",
  });
  local = await startGateway(chain.gatewayEnv());
}, 60_000);

afterAll(async () => {
  for (const g of [viaSlow, viaHanging, local]) await g?.close();
  slow?.stop();
  hanging?.stop();
  await chain?.stop();
});

async function onChain(payer: PrivateKeyAccount) {
  return { payer: await chain.balanceOf(chain.usdc.address, payer.address), payTo: await chain.balanceOf(chain.usdc.address, chain.payTo) };
}

async function checks(gw: TestGateway, payer: string) {
  return [
    ...(await gw.services.sql<{ state: string; tx_hash: string | null; amount_usdc: number }[]>`
      SELECT state, tx_hash, amount_usdc FROM payment_checks WHERE payer = ${payer} ORDER BY id`),
  ];
}

async function topupRows(gw: TestGateway, payer: string) {
  return [
    ...(await gw.services.sql<{ amount_usdc: number; tx_hash: string }[]>`
      SELECT amount_usdc, tx_hash FROM credits WHERE wallet = ${payer} AND kind = 'topup' ORDER BY id`),
  ];
}

const errors = captureErrors(/"payment facilitator unavailable"/);

describe("settlement outcome unknown", () => {
  test("the facilitator settles but answers after the timeout: 503, then the check credits it exactly once", async () => {
    const gw = viaSlow;
    const payer = await chain.newPayer();
    const wallet = payer.address.toLowerCase();
    const payment = await capturePayment(gw.fetch, (f) => v1Fetch(f, chain, payer), 4);
    const before = await onChain(payer);

    const res = await gw.call("POST", "/v1/topup", { amount: 4 }, { [payment.name]: payment.value });
    expect(res.status).toBe(503);
    expect(res.body).toEqual({ error: "payment facilitator unavailable" });
    expect(errors.take(/"payment facilitator unavailable"/).map((l) => (l.error as { message: string }).message)).toEqual([
      "facilitator settle timed out after 1000 ms",
    ]);
    const settled = await slow.settlements.at(-1)!;
    expect(settled.success).toBe(true);
    const after = await onChain(payer);
    expect(before.payer - after.payer).toBe(4_000_000n); // the money moved…
    expect(after.payTo - before.payTo).toBe(4_000_000n);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 0, locked: 0 }); // …and is not credited yet
    expect(await checks(gw, wallet)).toEqual([{ state: "pending", tx_hash: null, amount_usdc: 4_000_000 }]);

    expect(await gw.services.topup.recovery.checkPending()).toBe(1);
    const tx = settled.transaction.toLowerCase();
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 4_000_000, locked: 0 });
    expect(await topupRows(gw, wallet)).toEqual([{ amount_usdc: 4_000_000, tx_hash: tx }]);
    expect(await checks(gw, wallet)).toEqual([{ state: "credited", tx_hash: tx, amount_usdc: 4_000_000 }]);
    const q = new URLSearchParams(await gw.signIn(payer));
    const listed = await gw.call("GET", `/v1/topups/${wallet}?${q}`);
    expect(listed.status).toBe(200);
    expect(listed.body.topups.map((t: { amount_usdc: number; tx_hash: string }) => [t.amount_usdc, t.tx_hash])).toEqual([[4_000_000, tx]]);

    // Checking again, and replaying the payment, change nothing.
    expect(await gw.services.topup.recovery.checkPending()).toBe(0);
    const replay = await gw.call("POST", "/v1/topup", { amount: 4 }, { [payment.name]: payment.value });
    expect(replay.status).toBe(402);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 4_000_000, locked: 0 });
    expect(await topupRows(gw, wallet)).toHaveLength(1);
  }, 30_000);

  test("10 concurrent copies of one payment: the failed settles share one check, which credits nothing twice", async () => {
    const gw = local;
    const payer = await chain.newPayer();
    const wallet = payer.address.toLowerCase();
    const payment = await capturePayment(gw.fetch, (f) => v2Fetch(f, chain, payer), 3);
    const results = await Promise.all(
      Array.from({ length: 10 }, () => gw.call("POST", "/v1/topup", { amount: 3 }, { [payment.name]: payment.value })),
    );
    expect(results.filter((r) => r.status === 200)).toHaveLength(1);
    const open = await checks(gw, wallet);
    expect(open.length).toBeLessThanOrEqual(1);
    await gw.services.topup.recovery.checkPending();
    const [row] = await topupRows(gw, wallet);
    expect(await topupRows(gw, wallet)).toEqual([{ amount_usdc: 3_000_000, tx_hash: row!.tx_hash }]);
    expect((await checks(gw, wallet)).every((c) => c.state === "credited" && c.tx_hash === row!.tx_hash)).toBe(true);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 3_000_000, locked: 0 });
  }, 30_000);

  // Last: it moves the chain's clock forward.
  test("the facilitator never answers: nothing moved, the check stays open while the authorization lives, then is voided", async () => {
    const gw = viaHanging;
    const payer = await chain.newPayer();
    const wallet = payer.address.toLowerCase();
    const payment = await capturePayment(gw.fetch, (f) => v1Fetch(f, chain, payer), 2);
    const before = await onChain(payer);
    const res = await gw.call("POST", "/v1/topup", { amount: 2 }, { [payment.name]: payment.value });
    expect(res.status).toBe(503);
    expect(errors.take(/"payment facilitator unavailable"/).map((l) => (l.error as { message: string }).message)).toEqual([
      "facilitator settle timed out after 1000 ms",
    ]);
    expect(await checks(gw, wallet)).toEqual([{ state: "pending", tx_hash: null, amount_usdc: 2_000_000 }]);

    expect(await gw.services.topup.recovery.checkPending()).toBe(0); // still usable: it could settle yet
    expect(await checks(gw, wallet)).toEqual([{ state: "pending", tx_hash: null, amount_usdc: 2_000_000 }]);

    await chain.rpc("evm_increaseTime", [7_200]);
    await chain.rpc("evm_mine", []);
    expect(await gw.services.topup.recovery.checkPending()).toBe(1);
    expect(await checks(gw, wallet)).toEqual([{ state: "void", tx_hash: null, amount_usdc: 2_000_000 }]);
    expect(await onChain(payer)).toEqual(before);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 0, locked: 0 });
    expect(await topupRows(gw, wallet)).toEqual([]);
  }, 30_000);
});
