import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { PrivateKeyAccount } from "viem/accounts";
import { BASE, startGateway, type TestGateway } from "./helpers/gateway.ts";
import { startChain, type DevChain } from "./helpers/chain.ts";
import { v1Fetch, v2Fetch } from "./helpers/x402.ts";

// USDT with 18 decimals proves amounts follow the asset table, not an assumed 6.
let chain: DevChain;
let gw: TestGateway;

beforeAll(async () => {
  chain = await startChain({ usdtDecimals: 18 });
  gw = await startGateway(chain.gatewayEnv());
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await chain?.stop();
});

const decode = (h: string | null) => JSON.parse(Buffer.from(h!, "base64").toString("utf8"));
/** Arguments of a top-up call as a payer writes them (URL + init: x402-fetch resends the same init). */
const topupRequest = (amount: number): [string, RequestInit] => [
  `${BASE}/v1/topup`,
  { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ amount }) },
];

async function balances(payer: PrivateKeyAccount, token: `0x${string}`) {
  return { payer: await chain.balanceOf(token, payer.address), payTo: await chain.balanceOf(token, chain.payTo) };
}

describe("POST /v1/topup step 1: payment requirements", () => {
  test("402 with one accepts entry per asset, amounts in each asset's smallest unit, and the v2 header", async () => {
    const res = await gw.call("POST", "/v1/topup", { amount: 12.5 });
    expect(res.status).toBe(402);
    expect(res.body.x402Version).toBe(1);
    const [usdc, usdt] = res.body.accepts;
    expect(res.body.accepts).toHaveLength(2);
    expect(usdc).toMatchObject({
      scheme: "exact",
      network: "base-sepolia",
      amount: "12500000",
      maxAmountRequired: "12500000",
      asset: chain.usdc.address,
      payTo: chain.payTo,
      resource: `${BASE}/v1/topup`,
      mimeType: "application/json",
      maxTimeoutSeconds: 300,
      extra: { name: "USD Coin", version: "2" },
    });
    expect(usdc.description).toContain("12.5");
    expect(usdt).toMatchObject({
      scheme: "exact",
      amount: "12500000000000000000",
      maxAmountRequired: "12500000000000000000",
      asset: chain.usdt.address,
      payTo: chain.payTo,
      extra: { name: "Tether USD", version: "1", assetTransferMethod: "eip2612", spender: chain.relayer },
    });
    const v2 = decode(res.headers.get("payment-required"));
    expect(v2.x402Version).toBe(2);
    expect(v2.resource.url).toBe(`${BASE}/v1/topup`);
    // v2 also offers USDT through x402's Permit2 flow, ahead of the permit entry (test/topup.permit2.happy.test.ts).
    expect(v2.accepts.map((a: { network: string; amount: string }) => [a.network, a.amount])).toEqual([
      ["eip155:84532", "12500000"],
      ["eip155:84532", "12500000000000000000"],
      ["eip155:84532", "12500000000000000000"],
    ]);
  });
});

describe("end to end on the local chain with the x402 client libraries", () => {
  test("x402-fetch (v1), USDC by EIP-3009: tokens move on chain, the wallet is credited, the record is listed", async () => {
    const payer = await chain.newPayer();
    const wallet = payer.address.toLowerCase();
    const before = await balances(payer, chain.usdc.address);
    const res = await v1Fetch(gw.fetch, chain, payer)(...topupRequest(5));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ balance_usdc: 5_000_000, credited_usdc: 5_000_000 });
    const receipt = decode(res.headers.get("x-payment-response"));
    expect(receipt).toMatchObject({ success: true, network: "base-sepolia", payer: wallet });
    expect(receipt.transaction).toMatch(/^0x[0-9a-f]{64}$/);

    const after = await balances(payer, chain.usdc.address);
    expect(before.payer - after.payer).toBe(5_000_000n);
    expect(after.payTo - before.payTo).toBe(5_000_000n);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 5_000_000, locked: 0 });

    // The payer signs in, gets a key, and sees the top-up (API key in the header).
    const key = await gw.call("POST", "/v1/auth/keys", await gw.signIn(payer));
    expect(key.status).toBe(201);
    const list = await gw.call("GET", `/v1/topups/${payer.address}`, undefined, { authorization: `Bearer ${key.body.key}` });
    expect(list.status).toBe(200);
    expect(list.body).toMatchObject({ wallet, network: "Local dev chain (chain id 84532)" });
    expect(list.body.topups).toHaveLength(1);
    expect(list.body.topups[0]).toMatchObject({ amount_usdc: 5_000_000, tx_hash: receipt.transaction });
    expect(Number.isNaN(Date.parse(list.body.topups[0].created_at))).toBe(false);
  });

  test("@x402/fetch (v2), USDC by EIP-3009 via PAYMENT-SIGNATURE", async () => {
    const payer = await chain.newPayer();
    const before = await balances(payer, chain.usdc.address);
    const res = await v2Fetch(gw.fetch, chain, payer, "USDC")(...topupRequest(2.5));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ balance_usdc: 2_500_000, credited_usdc: 2_500_000 });
    expect(decode(res.headers.get("payment-response"))).toMatchObject({
      success: true,
      network: "eip155:84532",
      payer: payer.address.toLowerCase(),
    });
    const after = await balances(payer, chain.usdc.address);
    expect(before.payer - after.payer).toBe(2_500_000n);
    expect(after.payTo - before.payTo).toBe(2_500_000n);
    expect(await gw.ledgerState(payer.address.toLowerCase())).toEqual({ balance: 2_500_000, locked: 0 });
  });

  test("@x402/fetch (v2), USDT by EIP-2612 permit + transferFrom (18 decimals)", async () => {
    const payer = await chain.newPayer();
    const before = await balances(payer, chain.usdt.address);
    const res = await v2Fetch(gw.fetch, chain, payer, "USDT")(...topupRequest(3.000001));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ balance_usdc: 3_000_001, credited_usdc: 3_000_001 });
    const after = await balances(payer, chain.usdt.address);
    expect(before.payer - after.payer).toBe(3_000_001_000_000_000_000n);
    expect(after.payTo - before.payTo).toBe(3_000_001_000_000_000_000n);
    expect(await gw.ledgerState(payer.address.toLowerCase())).toEqual({ balance: 3_000_001, locked: 0 });
  });

  test("several top-ups of one wallet are listed newest first; SIWE and the api_key query work too", async () => {
    const payer = await chain.newPayer();
    const pay = v1Fetch(gw.fetch, chain, payer);
    for (const amount of [1, 2, 3]) expect((await pay(...topupRequest(amount))).status).toBe(200);
    expect(await gw.ledgerState(payer.address.toLowerCase())).toEqual({ balance: 6_000_000, locked: 0 });
    const { message, signature } = await gw.signIn(payer);
    const q = new URLSearchParams({ message, signature });
    const bySiwe = await gw.call("GET", `/v1/topups/${payer.address}?${q}`);
    expect(bySiwe.status).toBe(200);
    expect(bySiwe.body.topups.map((t: { amount_usdc: number }) => t.amount_usdc)).toEqual([3_000_000, 2_000_000, 1_000_000]);
    const ids = bySiwe.body.topups.map((t: { id: number }) => t.id);
    expect([...ids].sort((a, b) => b - a)).toEqual(ids);

    const key = await gw.call("POST", "/v1/auth/keys", await gw.signIn(payer));
    const byQuery = await gw.call("GET", `/v1/topups/${payer.address.toLowerCase()}?api_key=${key.body.key}`);
    expect(byQuery.status).toBe(200);
    expect(byQuery.body.topups).toHaveLength(3);
  });
});
