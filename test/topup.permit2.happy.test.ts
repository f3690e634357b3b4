import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createPermit2ApprovalTx, PERMIT2_ADDRESS, x402ExactPermit2ProxyAddress } from "@x402/evm";
import { createPublicClient, createWalletClient, http, parseAbi, parseEther } from "viem";
import type { PrivateKeyAccount } from "viem/accounts";
import { BASE, startGateway, type TestGateway } from "./helpers/gateway.ts";
import { startChain, type DevChain } from "./helpers/chain.ts";
import { permit2DomainSeparator } from "./helpers/permit2.ts";
import { decode, v2StockUsdtFetch } from "./helpers/x402.ts";

// USDT with 18 decimals: the Permit2 amounts follow the asset table too.
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

const pub = () => createPublicClient({ chain: chain.chain, transport: http(chain.rpcUrl) });
const USDT = (usd: number) => BigInt(Math.round(usd * 1e6)) * 10n ** 12n;
const topupRequest = (amount: number): [string, RequestInit] => [
  `${BASE}/v1/topup`,
  { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ amount }) },
];
const abi = parseAbi([
  "function DOMAIN_SEPARATOR() view returns (bytes32)",
  "function PERMIT2() view returns (address)",
  "function allowance(address owner, address spender) view returns (uint256)",
]);

/** The stock client pointed at the gateway, with the PAYMENT-SIGNATURE it sends kept (the request goes through). */
function recordingStockClient(payer: PrivateKeyAccount) {
  const sent: string[] = [];
  const spy = (async (input: string | URL | Request, init?: RequestInit) => {
    const req = new Request(input, init);
    const signature = req.headers.get("payment-signature");
    if (signature) sent.push(signature);
    return gw.fetch(req);
  }) as typeof fetch;
  return { pay: v2StockUsdtFetch(spy, chain, payer), sent };
}

async function usdtBalances(payer: PrivateKeyAccount) {
  return { payer: await chain.balanceOf(chain.usdt.address, payer.address), payTo: await chain.balanceOf(chain.usdt.address, chain.payTo) };
}

async function topupRows(wallet: string) {
  const rows = await gw.services.sql<{ amount_usdc: number; tx_hash: string }[]>`
    SELECT amount_usdc, tx_hash FROM credits WHERE wallet = ${wallet} AND kind = 'topup' ORDER BY id`;
  return rows.map((r) => ({ ...r }));
}

describe("the dev chain has Permit2 and x402's Permit2 proxy where @x402/evm expects them", () => {
  test("Permit2's domain separator is this chain's at the canonical address; the proxy points at Permit2", async () => {
    expect(await pub().readContract({ address: PERMIT2_ADDRESS, abi, functionName: "DOMAIN_SEPARATOR" })).toBe(
      permit2DomainSeparator(chain.chainId),
    );
    expect(await pub().readContract({ address: x402ExactPermit2ProxyAddress, abi, functionName: "PERMIT2" })).toBe(PERMIT2_ADDRESS);
  });
});

describe("POST /v1/topup offers USDT through Permit2 to x402 v2 clients", () => {
  test("the v2 terms: USDC first, then USDT by Permit2, then USDT by permit; EIP-2612 gas sponsoring declared; v1 body unchanged", async () => {
    const res = await gw.call("POST", "/v1/topup", { amount: 2 });
    expect(res.status).toBe(402);
    const v2 = decode(res.headers.get("payment-required")!);
    const terms = v2.accepts.map((a: { asset: string; amount: string; extra: Record<string, unknown> }) => [
      a.asset,
      a.amount,
      a.extra.assetTransferMethod,
    ]);
    expect(terms).toEqual([
      [chain.usdc.address, "2000000", undefined],
      [chain.usdt.address, USDT(2).toString(), "permit2"],
      [chain.usdt.address, USDT(2).toString(), "eip2612"],
    ]);
    expect(v2.accepts[1]).toMatchObject({
      scheme: "exact",
      network: "eip155:84532",
      payTo: chain.payTo,
      extra: { name: "Tether USD", version: "1" },
    });
    expect(v2.extensions.eip2612GasSponsoring.info).toEqual({ description: expect.any(String), version: "1" });
    expect(res.body.accepts.map((a: { extra: Record<string, unknown> }) => a.extra.assetTransferMethod)).toEqual([undefined, "eip2612"]);
  });
});

describe("a stock @x402/fetch + @x402/evm client pays USDT through Permit2", () => {
  test("no prior approval: it signs an EIP-2612 permit for Permit2 too; one transfer to PAY_TO, one credit, one record; a replay credits nothing", async () => {
    const payer = await chain.newPayer();
    const wallet = payer.address.toLowerCase();
    const { pay, sent } = recordingStockClient(payer);
    const before = await usdtBalances(payer);

    const res = await pay(...topupRequest(4.5));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ balance_usdc: 4_500_000, credited_usdc: 4_500_000 });
    const receipt = decode(res.headers.get("payment-response")!);
    expect(receipt).toMatchObject({ success: true, network: "eip155:84532", payer: wallet });
    expect(sent).toHaveLength(1);
    const payment = decode(sent[0]!);
    expect(payment.accepted.extra.assetTransferMethod).toBe("permit2");
    expect(payment.payload.permit2Authorization.spender).toBe(x402ExactPermit2ProxyAddress);
    expect(payment.extensions.eip2612GasSponsoring.info).toMatchObject({ from: payer.address, spender: PERMIT2_ADDRESS });

    const tx = await pub().getTransaction({ hash: receipt.transaction });
    expect(tx.to?.toLowerCase()).toBe(x402ExactPermit2ProxyAddress.toLowerCase());
    expect(tx.from.toLowerCase()).toBe(chain.relayer.toLowerCase());
    const after = await usdtBalances(payer);
    expect(before.payer - after.payer).toBe(USDT(4.5));
    expect(after.payTo - before.payTo).toBe(USDT(4.5));
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 4_500_000, locked: 0 });
    expect(await topupRows(wallet)).toEqual([{ amount_usdc: 4_500_000, tx_hash: receipt.transaction }]);

    const replay = await gw.call("POST", "/v1/topup", { amount: 4.5 }, { "payment-signature": sent[0]! });
    expect(replay.status).toBe(402);
    // The EIP-2612 permit was used and Permit2's allowance spent: the proxy's simulation fails on it.
    expect(replay.body.error).toBe("permit2_allowance_required");
    expect(await usdtBalances(payer)).toEqual(after);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 4_500_000, locked: 0 });
    expect(await topupRows(wallet)).toHaveLength(1);
  });

  test("a payer that approved Permit2 itself pays by the plain Permit2 transfer, and twice with two payments", async () => {
    const payer = await chain.newPayer();
    const wallet = payer.address.toLowerCase();
    // Approving costs the payer gas once, as any Permit2 user's first approval does.
    await chain.rpc("anvil_setBalance", [payer.address, `0x${parseEther("1").toString(16)}`]);
    const payerWallet = createWalletClient({ account: payer, chain: chain.chain, transport: http(chain.rpcUrl) });
    const approval = createPermit2ApprovalTx(chain.usdt.address);
    await pub().waitForTransactionReceipt({ hash: await payerWallet.sendTransaction({ ...approval, chain: chain.chain }) });

    const { pay, sent } = recordingStockClient(payer);
    const before = await usdtBalances(payer);
    for (const amount of [1, 2]) expect((await pay(...topupRequest(amount))).status).toBe(200);
    expect(sent.map((s) => decode(s).extensions?.eip2612GasSponsoring?.info?.signature)).toEqual([undefined, undefined]);
    const after = await usdtBalances(payer);
    expect(before.payer - after.payer).toBe(USDT(3));
    expect(after.payTo - before.payTo).toBe(USDT(3));
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 3_000_000, locked: 0 });
    expect((await topupRows(wallet)).map((r) => r.amount_usdc)).toEqual([1_000_000, 2_000_000]);
  });

  test("the same Permit2 payment sent 5 times concurrently: exactly one 200, one transfer, one credit", async () => {
    const payer = await chain.newPayer();
    const wallet = payer.address.toLowerCase();
    let header: string | undefined;
    const capture = (async (input: string | URL | Request, init?: RequestInit) => {
      const req = new Request(input, init);
      header = req.headers.get("payment-signature") ?? undefined;
      return header ? new Response("{}", { status: 200 }) : gw.fetch(req);
    }) as typeof fetch;
    await v2StockUsdtFetch(capture, chain, payer)(...topupRequest(2));
    const before = await usdtBalances(payer);
    const results = await Promise.all(
      Array.from({ length: 5 }, () => gw.call("POST", "/v1/topup", { amount: 2 }, { "payment-signature": header! })),
    );
    expect(results.map((r) => r.status).sort()).toEqual([200, 402, 402, 402, 402]);
    const after = await usdtBalances(payer);
    expect(before.payer - after.payer).toBe(USDT(2));
    expect(after.payTo - before.payTo).toBe(USDT(2));
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 2_000_000, locked: 0 });
    expect(await topupRows(wallet)).toHaveLength(1);
  });
});
