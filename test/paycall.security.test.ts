/**
 * A paid call moves money once and credits nothing it should not: a payment replayed (same key, another key,
 * /v1/topup), a bad signature, a settlement the facilitator fails, a payment below the terms; x402's
 * payment-identifier on paid calls and /v1/topup (same id + payload: the first result, no money; another payload:
 * 409). After each, the chain, Postgres and Redis agree and `admin audit` is clean.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { wrapFetchWithPayment, x402Client } from "@x402/fetch";
import type { PrivateKeyAccount } from "viem/accounts";
import { auditLedger } from "../src/audit/audit.ts";
import { startChain, type DevChain } from "./helpers/chain.ts";
import { startFacilitator, type FacilitatorServer } from "./helpers/facilitator.ts";
import { BASE, startGateway, type TestGateway } from "./helpers/gateway.ts";
import { decode, encode, signV1Payment, v2Fetch } from "./helpers/x402.ts";

let chain: DevChain;
let gw: TestGateway;
let failing: FacilitatorServer;
let viaFailing: TestGateway;
/** Sees each Postgres query `gw` sends, when a test sets it. */
let onQuery: ((query: string) => void) | undefined;

beforeAll(async () => {
  chain = await startChain();
  gw = await startGateway(chain.gatewayEnv(), { onQuery: (q) => onQuery?.(q) });
  failing = await startFacilitator(chain, { settleFails: true });
  viaFailing = await startGateway({ ...chain.gatewayEnv(), FACILITATOR: "http", FACILITATOR_URL: failing.url });
}, 60_000);

afterAll(async () => {
  for (const g of [gw, viaFailing]) await g?.close();
  failing?.stop();
  await chain?.stop();
});

const messages = [{ role: "user" as const, content: "Say hello." }];
const chatBody = { model: "standin/echo", messages };
const chat = (g: TestGateway, key: string, headers: Record<string, string> = {}) =>
  g.call("POST", "/v1/chat/completions", chatBody, { authorization: `Bearer ${key}`, ...headers });

/** Runs a stock client up to its paid chat retry and returns the payment header it made, unsent. */
async function capture(g: TestGateway, key: string, make: (f: typeof fetch) => typeof fetch) {
  let captured: { name: string; value: string } | undefined;
  const spy = (async (input: string | URL | Request, init?: RequestInit) => {
    const req = new Request(input, init);
    const v2 = req.headers.get("payment-signature");
    const v1 = req.headers.get("x-payment");
    if (v1 || v2) {
      captured = v2 ? { name: "payment-signature", value: v2 } : { name: "x-payment", value: v1! };
      return Response.json({}, { status: 200 });
    }
    return g.fetch(req);
  }) as typeof fetch;
  await make(spy)(`${BASE}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
    body: JSON.stringify(chatBody),
  });
  if (!captured) throw new Error("the client sent no payment");
  return { [captured.name]: captured.value };
}

/** @x402/fetch (v2) paying USDC with a payment-identifier id, as x402's docs show it (a beforePaymentCreation hook). */
function v2WithId(f: typeof fetch, payer: PrivateKeyAccount, id: string): typeof fetch {
  const client = new x402Client();
  registerExactEvmScheme(client, { signer: payer });
  client.setSpendControls({ allowedAssets: [{ network: `eip155:${chain.chainId}`, asset: chain.usdc.address }] });
  client.registerPolicy((_v, reqs) => reqs.filter((r) => r.asset.toLowerCase() === chain.usdc.address.toLowerCase()));
  client.onBeforePaymentCreation(async ({ paymentRequired }) => {
    const ext = (paymentRequired.extensions ??= {}) as Record<string, { info?: Record<string, unknown> }>;
    ext["payment-identifier"] = { ...ext["payment-identifier"], info: { ...ext["payment-identifier"]?.info, id } };
  });
  return wrapFetchWithPayment(f, client) as typeof fetch;
}

async function topupRows(g: TestGateway, wallet: string) {
  return [
    ...(await g.services.sql<{ amount_usdc: number; payer: string }[]>`
      SELECT amount_usdc, payer FROM credits WHERE wallet = ${wallet} AND kind = 'topup' ORDER BY id`),
  ];
}

const usdc = (who: `0x${string}`) => chain.balanceOf(chain.usdc.address, who);

async function expectAuditClean(g: TestGateway) {
  const s = g.services;
  const r = await auditLedger({ redis: s.redis, scripts: s.scripts, sql: s.sql, names: s.ledger.names });
  expect(r.differences).toEqual([]);
}

describe("a payment credits once, whoever carries it again", () => {
  test("replayed on the same key or another key: 402 PAYMENT_ALREADY_USED with no offer; on /v1/topup: 402; nothing credited, nothing moved", async () => {
    const owner = await gw.newWallet(0);
    const other = await gw.newWallet(0);
    const payer = await chain.newPayer();
    const header = await capture(gw, owner.key, (f) => v2Fetch(f, chain, payer));
    const first = await chat(gw, owner.key, header);
    expect(first.status).toBe(200);
    const afterFirst = { owner: await gw.ledgerState(owner.wallet), payer: await usdc(payer.address) };
    expect(await topupRows(gw, owner.wallet)).toEqual([{ amount_usdc: 1_000_000, payer: payer.address.toLowerCase() }]);

    // Its own answer, not a 402 "short of credit" (the wallet holds the credit the payment bought), and no fresh
    // offer an x402 client would pay again.
    const again = await chat(gw, owner.key, header);
    expect([again.status, again.body]).toEqual([
      402,
      {
        error: "PAYMENT_ALREADY_USED",
        message:
          "This payment was already used (invalid_exact_evm_nonce_already_used); it moves no money again and nothing was charged. The credit it bought is in the wallet of the key that paid with it: send the request without a payment header to spend it, or sign a new payment",
      },
    ]);
    expect(decode(again.headers.get("payment-response")!)).toMatchObject({ success: false });
    expect(again.headers.get("payment-required")).toBeNull();

    const elsewhere = await chat(gw, other.key, header);
    expect([elsewhere.status, elsewhere.body.error]).toEqual([402, "PAYMENT_ALREADY_USED"]);
    expect(await gw.ledgerState(other.wallet)).toEqual({ balance: 0, locked: 0 });

    const topup = await gw.call("POST", "/v1/topup", { amount: 1 }, header);
    expect(topup.status).toBe(402);

    expect(await gw.ledgerState(owner.wallet)).toEqual(afterFirst.owner);
    expect(await usdc(payer.address)).toBe(afterFirst.payer);
    expect(await topupRows(gw, owner.wallet)).toHaveLength(1);
    expect(await topupRows(gw, other.wallet)).toEqual([]);
    expect(await topupRows(gw, payer.address.toLowerCase())).toEqual([]);
    await expectAuditClean(gw);
  });

  test("a bad signature is refused by the facilitator: 402 with the reason, nothing moved or credited", async () => {
    const { wallet, key } = await gw.newWallet(0);
    const payer = await chain.newPayer();
    const header = await capture(gw, key, (f) => v2Fetch(f, chain, payer));
    const payload = decode(header["payment-signature"]!);
    payload.payload.signature = `0x${"11".repeat(65)}`;
    const before = await usdc(payer.address);
    const res = await chat(gw, key, { "payment-signature": encode(payload) });
    expect(res.status).toBe(402);
    expect(res.body.error).toBe("INSUFFICIENT_BALANCE");
    expect(decode(res.headers.get("payment-response")!)).toMatchObject({ success: false, errorReason: expect.any(String) });
    expect(decode(res.headers.get("payment-required")!).accepts).toHaveLength(3);
    expect(await usdc(payer.address)).toBe(before);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 0, locked: 0 });
    await expectAuditClean(gw);
  });

  test("a payment below the terms is refused before anything moves", async () => {
    const { wallet, key } = await gw.newWallet(0);
    const payer = await chain.newPayer();
    const before = await usdc(payer.address);
    const small = await signV1Payment(chain, payer, { to: chain.payTo, value: 500_000n });
    const res = await chat(gw, key, { "x-payment": small });
    expect(res.status).toBe(402);
    expect(res.body.message).toBe("Payment not accepted (it pays 500000 µUSDC, below the 1000000 asked); nothing was charged");
    expect(res.body.accepts[0].amount).toBe("1000000");
    expect(await usdc(payer.address)).toBe(before);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 0, locked: 0 });
    expect(await topupRows(gw, wallet)).toEqual([]);
  });

  test("a key whose own budget cannot cover the request is refused before the payment moves (paying cannot lift it)", async () => {
    const { wallet, key } = await gw.newWallet(0, { budget_usdc: 100 });
    const payer = await chain.newPayer();
    const before = await usdc(payer.address);
    const payment = await signV1Payment(chain, payer, { to: chain.payTo, value: 1_000_000n });
    const res = await chat(gw, key, { "x-payment": payment });
    expect(res.status).toBe(402);
    expect(res.body.error).toBe("KEY_BUDGET_EXCEEDED");
    expect(res.body.key_budget_left_usdc).toBe(100);
    expect(res.body.accepts).toBeUndefined();
    expect(res.headers.get("payment-required")).toBeNull();
    expect(await usdc(payer.address)).toBe(before);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 0, locked: 0 });
    expect(await topupRows(gw, wallet)).toEqual([]);
  });

  test("a revoked key is refused (401) before the payment moves: nothing settled, nothing credited", async () => {
    const { account, wallet, key, keyId } = await gw.newWallet(0);
    const payer = await chain.newPayer();
    // The client meets the 402 terms with the key still active (its principal is now cached in process), then it is revoked.
    const header = await capture(gw, key, (f) => v2Fetch(f, chain, payer));
    const revoke = await gw.call("DELETE", `/v1/auth/keys/${keyId}`, await gw.signIn(account));
    expect(revoke.status).toBe(200);
    const before = await usdc(payer.address);
    const res = await chat(gw, key, header);
    expect(res.status).toBe(401);
    expect(res.body.error).toBe("UNAUTHORIZED");
    expect(res.headers.get("payment-response")).toBeNull();
    expect(await usdc(payer.address)).toBe(before);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 0, locked: 0 });
    expect(await topupRows(gw, wallet)).toEqual([]);
    await expectAuditClean(gw);
  });

  test("a settlement the facilitator fails: 402 with the reason, nothing credited, nothing moved", async () => {
    const { wallet, key } = await viaFailing.newWallet(0);
    const payer = await chain.newPayer();
    const before = await usdc(payer.address);
    const res = await v2Fetch(
      viaFailing.fetch,
      chain,
      payer,
    )(`${BASE}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify(chatBody),
    });
    expect(res.status).toBe(402);
    expect(decode(res.headers.get("payment-response")!)).toMatchObject({ success: false, errorReason: "transaction_failed" });
    expect((await res.json()).message).toBe("Payment not accepted (transaction_failed); nothing was charged");
    expect(await usdc(payer.address)).toBe(before);
    expect(await viaFailing.ledgerState(wallet)).toEqual({ balance: 0, locked: 0 });
    expect(await topupRows(viaFailing, wallet)).toEqual([]);
    // The check opened before settling is voided by the chain once the authorization can no longer be used.
    expect(await viaFailing.services.topup.recovery.checkPending()).toBe(0);
    await expectAuditClean(viaFailing);
  });
});

describe("a concurrent spend after the credit", () => {
  test("leaves the wallet short again: a fresh 402 offer with the first receipt, and the payment is never charged twice", async () => {
    const { wallet, key, keyId } = await gw.newWallet(0);
    const payer = await chain.newPayer();
    const header = await capture(gw, key, (f) => v2Fetch(f, chain, payer));
    const principal = gw.services.ledger.principal(keyId, wallet);
    let spending: Promise<unknown> | undefined;
    // The moment the paid call closes its payment check (credited, not yet reserved), another request of the
    // wallet holds all but 1 µUSDC: its reserve reaches Redis before the paid call's own.
    onQuery = (q) => {
      if (!spending && q.includes("credited by its request")) spending = gw.services.ledger.reserve(principal, "concurrent", 999_999);
    };
    const res = await chat(gw, key, header);
    onQuery = undefined;
    expect(await spending).toMatchObject({ ok: true });
    expect(res.status).toBe(402);
    expect(res.body).toMatchObject({ error: "INSUFFICIENT_BALANCE", available_usdc: 1, x402Version: 1 });
    expect(decode(res.headers.get("payment-response")!)).toMatchObject({ success: true });
    expect(decode(res.headers.get("payment-required")!).accepts[0].amount).toBe("1000000");
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 999_999 });

    // The client resends the same payment: refused as already used, nothing moves; its credit stays the one top-up.
    const spent = await usdc(payer.address);
    const again = await chat(gw, key, header);
    expect([again.status, again.body.error]).toEqual([402, "PAYMENT_ALREADY_USED"]);
    expect(await usdc(payer.address)).toBe(spent);
    expect(await topupRows(gw, wallet)).toEqual([{ amount_usdc: 1_000_000, payer: payer.address.toLowerCase() }]);
    expect(await gw.services.ledger.release(principal, "concurrent")).toBe(true);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
    await expectAuditClean(gw);
  });
});

describe("payment-identifier", () => {
  test("paid call: the same id and payload again is served from the credit, with the first receipt and no new payment", async () => {
    const { wallet, key } = await gw.newWallet(0);
    const payer = await chain.newPayer();
    const id = `pay_${crypto.randomUUID().replaceAll("-", "")}`;
    const header = await capture(gw, key, (f) => v2WithId(f, payer, id));
    expect(decode(header["payment-signature"]!).extensions["payment-identifier"].info.id).toBe(id);
    const first = await chat(gw, key, header);
    expect(first.status).toBe(200);
    const spent = await usdc(payer.address);
    const second = await chat(gw, key, header);
    expect(second.status).toBe(200);
    expect(second.headers.get("payment-response")).toBe(first.headers.get("payment-response"));
    expect(await usdc(payer.address)).toBe(spent);
    expect(await topupRows(gw, wallet)).toHaveLength(1);

    // Another payload under the same id: 409 in the route's shape, nothing moved.
    const other = decode(header["payment-signature"]!);
    other.payload.authorization.nonce = `0x${"33".repeat(32)}`;
    const conflict = await chat(gw, key, { "payment-signature": encode(other) });
    expect(conflict.status).toBe(409);
    expect(conflict.body).toEqual({ error: "CONFLICT", message: "payment identifier already names another payment" });
    expect(await usdc(payer.address)).toBe(spent);
    expect(await topupRows(gw, wallet)).toHaveLength(1);
    await expectAuditClean(gw);
  });

  test("/v1/topup: the same id and payload returns the first answer; another payload is 409 {error}", async () => {
    const payer = await chain.newPayer();
    const wallet = payer.address.toLowerCase();
    const id = `pay_${crypto.randomUUID().replaceAll("-", "")}`;
    let sent: Record<string, string> | undefined;
    const spy = (async (input: string | URL | Request, init?: RequestInit) => {
      const req = new Request(input, init);
      const h = req.headers.get("payment-signature");
      if (h) sent = { "payment-signature": h };
      return gw.fetch(req);
    }) as typeof fetch;
    const request = { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ amount: 2 }) };
    const first = await v2WithId(spy, payer, id)(`${BASE}/v1/topup`, request);
    expect(first.status).toBe(200);
    const firstBody = await first.json();
    expect(firstBody).toEqual({ balance_usdc: 2_000_000, credited_usdc: 2_000_000 });
    const spent = await usdc(payer.address);

    const again = await gw.call("POST", "/v1/topup", { amount: 2 }, sent!);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(firstBody);
    expect(again.headers.get("payment-response")).toBe(first.headers.get("payment-response"));

    const payload = decode(sent!["payment-signature"]!);
    payload.payload.authorization.nonce = `0x${"22".repeat(32)}`;
    const conflict = await gw.call("POST", "/v1/topup", { amount: 2 }, { "payment-signature": encode(payload) });
    expect(conflict.status).toBe(409);
    expect(conflict.body).toEqual({ error: "payment identifier already names another payment" });
    expect(await usdc(payer.address)).toBe(spent);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 2_000_000, locked: 0 });
    await expectAuditClean(gw);
  });
});
