import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { PrivateKeyAccount } from "viem/accounts";
import { startChain, type DevChain } from "./helpers/chain.ts";
import { startGateway, type TestGateway } from "./helpers/gateway.ts";
import { capturePayment, decode, encode, signV1Payment, v1Fetch, v2Fetch } from "./helpers/x402.ts";

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

const topup = (amount: unknown, headers: Record<string, string> = {}) =>
  gw.call("POST", "/v1/topup", amount === undefined ? {} : { amount }, headers);

/** Token balances of payer and PAY_TO and the payer's ledger balance: what a refused payment must not change. */
async function snapshot(payer: PrivateKeyAccount) {
  return {
    payer: await chain.balanceOf(chain.usdc.address, payer.address),
    payTo: await chain.balanceOf(chain.usdc.address, chain.payTo),
    ledger: await gw.ledgerState(payer.address.toLowerCase()),
  };
}

describe("amount is validated before any 402", () => {
  test.each([
    ["0.5 (below the minimum)", 0.5, /minimum top-up is 1 USD/],
    ["0", 0, /minimum/],
    ["negative", -5, /at most 6 decimals|minimum/],
    ["7 decimals", 1.0000001, /at most 6 decimals/],
    ["a string", "5", /amount/],
    ["beyond the maximum", 5_000_000_000, /maximum top-up/],
    ["an exponent", 1e21, /at most 6 decimals/],
    ["missing", undefined, /amount/],
  ])("%s: 400 VALIDATION_ERROR", async (_name, amount, message) => {
    const res = await topup(amount);
    expect(res.status).toBe(400);
    expect(res.body.error).toBe("VALIDATION_ERROR");
    expect(res.body.message).toMatch(message);
    expect(res.headers.get("payment-required")).toBeNull();
  });

  test("0.5 with a valid payment attached is still 400 and moves nothing", async () => {
    const payer = await chain.newPayer();
    const payment = await capturePayment(gw.fetch, (f) => v1Fetch(f, chain, payer), 1);
    const before = await snapshot(payer);
    const res = await topup(0.5, { [payment.name]: payment.value });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe("VALIDATION_ERROR");
    expect(await snapshot(payer)).toEqual(before);
  });

  test("1 USD and 1.000001 USD are accepted amounts (402)", async () => {
    expect((await topup(1)).status).toBe(402);
    const r = await topup(1.000001);
    expect(r.status).toBe(402);
    expect(r.body.accepts[0].amount).toBe("1000001");
  });
});

describe("payment header problems are 400 {error} with no code (spec error rule 5)", () => {
  test.each([
    ["garbage", "%%% not base64 %%%"],
    ["base64 of non-JSON", Buffer.from("hello there").toString("base64")],
    ["base64 of a JSON array", encode([1, 2])],
  ])("%s: invalid payment encoding", async (_name, header) => {
    const res = await topup(5, { "x-payment": header });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "invalid payment encoding" });
  });

  test("the v2 PAYMENT-SIGNATURE header is read the same way", async () => {
    const res = await topup(5, { "payment-signature": "***" });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "invalid payment encoding" });
  });

  test("wrong amount: a payment for 5 USD sent with amount 6 is a mismatch, nothing moves", async () => {
    const payer = await chain.newPayer();
    const payment = await capturePayment(gw.fetch, (f) => v1Fetch(f, chain, payer), 5);
    const before = await snapshot(payer);
    const res = await topup(6, { [payment.name]: payment.value });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "mismatched payment: amount" });
    expect(await snapshot(payer)).toEqual(before);
  });

  test("wrong amount in a v2 payment: its accepted terms are not the offered ones", async () => {
    const payer = await chain.newPayer();
    const payment = await capturePayment(gw.fetch, (f) => v2Fetch(f, chain, payer), 5);
    expect(payment.name).toBe("payment-signature");
    const res = await topup(7, { [payment.name]: payment.value });
    expect(res.status).toBe(400);
    expect(res.body.error).toStartWith("mismatched payment");
    expect(Object.keys(res.body)).toEqual(["error"]);
  });

  test("wrong payTo: an authorization to another address is a mismatch", async () => {
    const payer = await chain.newPayer();
    const header = await signV1Payment(chain, payer, { to: payer.address, value: 5_000_000n });
    const before = await snapshot(payer);
    const res = await topup(5, { "x-payment": header });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "mismatched payment: payTo" });
    expect(await snapshot(payer)).toEqual(before);
  });

  test("wrong network or scheme: a mismatch", async () => {
    const payer = await chain.newPayer();
    const p = decode(await signV1Payment(chain, payer, { to: chain.payTo, value: 5_000_000n }));
    for (const changed of [
      { ...p, network: "base" },
      { ...p, scheme: "upto" },
    ]) {
      const res = await topup(5, { "x-payment": encode(changed) });
      expect(res.status).toBe(400);
      expect(res.body.error).toStartWith("mismatched payment");
    }
  });

  test("a payer address that is not an address: 400 invalid payer address", async () => {
    const payer = await chain.newPayer();
    const p = decode(await signV1Payment(chain, payer, { to: chain.payTo, value: 5_000_000n }));
    p.payload.authorization.from = "0x12345";
    const res = await topup(5, { "x-payment": encode(p) });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "invalid payer address" });
  });
});

describe("payments the facilitator refuses: 402 with the requirements again, nothing credited", () => {
  test("tampered signature", async () => {
    const payer = await chain.newPayer();
    const payment = await capturePayment(gw.fetch, (f) => v1Fetch(f, chain, payer), 5);
    const p = decode(payment.value);
    const sig: string = p.payload.signature;
    p.payload.signature = sig.slice(0, 10) + (sig[10] === "a" ? "b" : "a") + sig.slice(11);
    const before = await snapshot(payer);
    const res = await topup(5, { "x-payment": encode(p) });
    expect(res.status).toBe(402);
    expect(res.body.error).toMatch(/signature/);
    expect(res.body.accepts).toHaveLength(2);
    expect(await snapshot(payer)).toEqual(before);
  });

  test("expired authorization", async () => {
    const payer = await chain.newPayer();
    const now = BigInt(Math.floor(Date.now() / 1000));
    const header = await signV1Payment(chain, payer, {
      to: chain.payTo,
      value: 5_000_000n,
      validAfter: now - 3600n,
      validBefore: now - 60n,
    });
    const before = await snapshot(payer);
    const res = await topup(5, { "x-payment": header });
    expect(res.status).toBe(402);
    expect(res.body.error).toMatch(/valid_before|expired/);
    expect(await snapshot(payer)).toEqual(before);
  });

  test("a payer without the funds", async () => {
    const payer = await chain.newPayer(1);
    const header = await signV1Payment(chain, payer, { to: chain.payTo, value: 5_000_000n });
    const before = await snapshot(payer);
    const res = await topup(5, { "x-payment": header });
    expect(res.status).toBe(402);
    expect(res.body.error).toMatch(/insufficient|balance|simulation/);
    expect(await snapshot(payer)).toEqual(before);
  });

  test("a USDC authorization presented as the USDT (permit) requirement: mismatch", async () => {
    const payer = await chain.newPayer();
    const payment = decode((await capturePayment(gw.fetch, (f) => v2Fetch(f, chain, payer), 5)).value);
    const offer = decode((await topup(5)).headers.get("payment-required")!);
    payment.accepted = offer.accepts.find((a: { extra: Record<string, unknown> }) => a.extra.assetTransferMethod === "eip2612");
    const res = await topup(5, { "payment-signature": encode(payment) });
    expect(res.status).toBe(400);
    // The same USDT terms are offered twice (Permit2 first): neither takes an EIP-3009 authorization.
    expect(res.body).toEqual({ error: "mismatched payment: USDT is paid by permit2 or permit" });
  });
});
