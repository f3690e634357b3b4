/**
 * x402 `upto` without a key: the stock x402 client (`@x402/fetch` + `@x402/evm`'s `upto` scheme, unmodified) around the
 * official openai SDK, given no key, signs a Permit2 authorization for at most the call's hold (and an EIP-2612 permit
 * for Permit2: it pays no gas), the call is served, and the chain is asked for exactly what it cost: the payer's USDC
 * falls by the charge, to the µUSDC. A JSON answer says so in PAYMENT-RESPONSE, a stream in an SSE comment before
 * `data: [DONE]`. `admin audit` is clean after each.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { x402Client, wrapFetchWithPayment } from "@x402/fetch";
import { toClientEvmSigner } from "@x402/evm";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { UptoEvmScheme } from "@x402/evm/upto/client";
import OpenAI from "openai";
import { createPublicClient, http } from "viem";
import type { PrivateKeyAccount } from "viem/accounts";
import { auditLedger } from "../src/audit/audit.ts";
import { startChain, type DevChain } from "./helpers/chain.ts";
import { BASE, expectedCharge, startGateway, type TestGateway } from "./helpers/gateway.ts";
import { usageFor } from "./helpers/openaiStandin.ts";
import { decode } from "./helpers/x402.ts";

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

const messages = [{ role: "user" as const, content: "Say hello." }];
const usage = usageFor(messages.length);
const charge = expectedCharge(usage.prompt_tokens, usage.completion_tokens);

/** The openai SDK requires an apiKey: this fetch drops the Authorization header it makes from it (docs/payments.md). */
const withoutKey = (inner: typeof fetch) =>
  ((input: string | URL | Request, init?: RequestInit) => {
    const req = new Request(input, init);
    req.headers.delete("authorization");
    return inner(req);
  }) as typeof fetch;

/**
 * x402's stock client as its docs set it up, with both EVM schemes: `upto` and `exact` (the 402 lists `upto` first, so
 * `upto` is what it pays), the chain's RPC for the token's permit nonce, and the dev chain's USDC allowed.
 */
function stockClient(payer: PrivateKeyAccount, inner: typeof fetch): typeof fetch {
  const pub = createPublicClient({ chain: chain.chain, transport: http(chain.rpcUrl) });
  const signer = toClientEvmSigner(payer, pub);
  const network = `eip155:${chain.chainId}` as const;
  const client = new x402Client()
    .register(network, new UptoEvmScheme(signer, { rpcUrl: chain.rpcUrl }))
    .register(network, new ExactEvmScheme(signer, { rpcUrl: chain.rpcUrl }));
  client.setSpendControls({ allowedAssets: [{ network, asset: chain.usdc.address }] });
  return wrapFetchWithPayment(inner, client) as typeof fetch;
}

const sdk = (f: typeof fetch) => new OpenAI({ apiKey: "unused", baseURL: `${BASE}/v1`, maxRetries: 0, fetch: f });
const usdc = (who: `0x${string}`) => chain.balanceOf(chain.usdc.address, who);

async function expectAuditClean() {
  const s = gw.services;
  await s.flusher.drain();
  const r = await auditLedger({ redis: s.redis, scripts: s.scripts, sql: s.sql, names: s.ledger.names });
  expect(r.differences).toEqual([]);
  expect(r.clean).toBe(true);
}

async function uptoRows(payer: string) {
  return [
    ...(await gw.services.sql<{ state: string; max_usdc: number; charge_usdc: number; tx_hash: string | null }[]>`
      SELECT state, max_usdc, charge_usdc, tx_hash FROM upto_settles WHERE payer = ${payer} ORDER BY created_at`),
  ];
}

describe("upto", () => {
  test("the 402 lists upto (Permit2, with the facilitator's address) first, then exact", async () => {
    const res = await gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages });
    expect(res.status).toBe(402);
    const v2 = decode(res.headers.get("payment-required")!);
    const hold = String(res.body.required_usdc);
    expect(v2.accepts.map((a: Record<string, string>) => [a.scheme, a.asset, a.amount])).toEqual([
      ["upto", chain.usdc.address, hold],
      ["exact", chain.usdc.address, hold],
    ]);
    expect(v2.accepts[0].extra).toMatchObject({ assetTransferMethod: "permit2", facilitatorAddress: chain.relayer });
    expect(Object.keys(v2.extensions).sort()).toEqual(["eip2612GasSponsoring", "payment-identifier", "sign-in-with-x"]);
  });

  test("JSON: served, then settled for exactly the charge; PAYMENT-RESPONSE says so", async () => {
    const payer = await chain.newPayer(5);
    const wallet = payer.address.toLowerCase();
    const before = { payer: await usdc(payer.address), payTo: await usdc(chain.payTo) };
    const { data, response } = await sdk(stockClient(payer, withoutKey(gw.fetch)))
      .chat.completions.create({ model: "standin/echo", messages })
      .withResponse();
    expect(data.choices[0]!.message.content).toBeTruthy();
    const receipt = decode(response.headers.get("payment-response")!);
    expect(receipt).toMatchObject({ success: true, payer: wallet, amount: String(charge), network: `eip155:${chain.chainId}` });
    expect(receipt.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    expect(before.payer - (await usdc(payer.address))).toBe(BigInt(charge));
    expect((await usdc(chain.payTo)) - before.payTo).toBe(BigInt(charge));
    expect(await uptoRows(wallet)).toEqual([
      { state: "settled", max_usdc: expect.any(Number), charge_usdc: charge, tx_hash: receipt.transaction },
    ]);
    // The authorization's ledger wallet is back where it was: credited the charge, charged it.
    expect(await gw.ledgerState(`upto:${wallet}`)).toEqual({ balance: 0, locked: 0 });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 0, locked: 0 });
    await expectAuditClean();
  });

  test("stream: chunks as usual, the settlement in an SSE comment before [DONE]; the openai SDK reads it unharmed", async () => {
    const payer = await chain.newPayer(5);
    const wallet = payer.address.toLowerCase();
    const before = await usdc(payer.address);
    let raw: Promise<string> | undefined;
    const tap = (async (input: string | URL | Request, init?: RequestInit) => {
      const res = await gw.fetch(input, init);
      if (res.status !== 200 || !res.body) return res;
      const [mine, theirs] = res.body.tee();
      raw = new Response(mine).text();
      return new Response(theirs, { status: res.status, headers: res.headers });
    }) as typeof fetch;
    const stream = await sdk(stockClient(payer, withoutKey(tap))).chat.completions.create({
      model: "standin/echo",
      messages,
      stream: true,
    });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
    expect(text.length).toBeGreaterThan(0);
    const lines = (await raw!).split("\n").filter((l) => l.length > 0);
    const at = lines.findIndex((l) => l.startsWith(": x402.settlement "));
    expect(at).toBeGreaterThan(0);
    expect(lines[at + 1]).toBe("data: [DONE]");
    const settlement = JSON.parse(lines[at]!.slice(": x402.settlement ".length));
    expect(settlement).toMatchObject({ success: true, payer: wallet, amount: String(charge) });
    expect(before - (await usdc(payer.address))).toBe(BigInt(charge));
    expect(await gw.ledgerState(`upto:${wallet}`)).toEqual({ balance: 0, locked: 0 });
    await expectAuditClean();
  });

  test("a call the provider fails costs nothing: no transaction, the authorization settled at 0", async () => {
    const payer = await chain.newPayer(5);
    const wallet = payer.address.toLowerCase();
    const before = await usdc(payer.address);
    const failed = await sdk(stockClient(payer, withoutKey(gw.fetch)))
      .chat.completions.create({ model: "standin/fail-500", messages })
      .then(
        () => undefined,
        (e: { status?: number; headers?: Headers }) => e,
      );
    expect(failed?.status).toBe(502);
    expect(decode(failed!.headers!.get("payment-response")!)).toMatchObject({ success: true, amount: "0", transaction: "" });
    expect(await usdc(payer.address)).toBe(before);
    expect(await uptoRows(wallet)).toEqual([{ state: "settled", max_usdc: expect.any(Number), charge_usdc: 0, tx_hash: null }]);
    expect(await gw.ledgerState(`upto:${wallet}`)).toEqual({ balance: 0, locked: 0 });
    await expectAuditClean();
  });

  test("the same PAYMENT-SIGNATURE again: 402 with the reason, no money moves", async () => {
    const payer = await chain.newPayer(5);
    const wallet = payer.address.toLowerCase();
    let sent: string | undefined;
    const spy = (async (input: string | URL | Request, init?: RequestInit) => {
      const req = new Request(input, init);
      sent ??= req.headers.get("payment-signature") ?? undefined;
      return gw.fetch(req);
    }) as typeof fetch;
    await sdk(stockClient(payer, withoutKey(spy))).chat.completions.create({ model: "standin/echo", messages });
    const onChain = await usdc(payer.address);
    const again = await gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages }, { "payment-signature": sent! });
    expect(again.status).toBe(402);
    expect(again.body.error).toBe("PAYMENT_REQUIRED");
    expect(again.body.message).toMatch(/^Payment not accepted \(/);
    expect(await usdc(payer.address)).toBe(onChain);
    expect((await uptoRows(wallet)).length).toBe(1);
    expect(await gw.ledgerState(`upto:${wallet}`)).toEqual({ balance: 0, locked: 0 });
    await expectAuditClean();
  });

  test("payment-identifier: the same payload again gets the first answer and moves nothing; another payload under the id is 409", async () => {
    const payer = await chain.newPayer(5);
    const wallet = payer.address.toLowerCase();
    const id = `upto-${crypto.randomUUID()}`;
    /** The stock client's PAYMENT-SIGNATURE for this call, made but not sent, with a payment-identifier id added. */
    const signed = async () => {
      let captured: string | undefined;
      const spy = (async (input: string | URL | Request, init?: RequestInit) => {
        const req = new Request(input, init);
        captured = req.headers.get("payment-signature") ?? undefined;
        return captured ? new Response("{}", { status: 200, headers: { "content-type": "application/json" } }) : gw.fetch(req);
      }) as typeof fetch;
      await stockClient(payer, spy)(`${BASE}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "standin/echo", messages }),
      });
      const d = decode(captured!);
      return Buffer.from(JSON.stringify({ ...d, extensions: { ...d.extensions, "payment-identifier": { info: { id } } } })).toString(
        "base64",
      );
    };
    const header = await signed();
    const before = await usdc(payer.address);
    const first = await gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages }, { "payment-signature": header });
    expect(first.status).toBe(200);
    expect(decode(first.headers.get("payment-response")!)).toMatchObject({ success: true, amount: String(charge) });
    expect(before - (await usdc(payer.address))).toBe(BigInt(charge));
    const again = await gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages }, { "payment-signature": header });
    expect(again.status).toBe(200);
    expect(again.body).toEqual(first.body);
    expect(again.headers.get("payment-response")).toBe(first.headers.get("payment-response"));
    const other = await gw.call(
      "POST",
      "/v1/chat/completions",
      { model: "standin/echo", messages },
      { "payment-signature": await signed() },
    );
    expect([other.status, other.body.error]).toEqual([409, "CONFLICT"]);
    expect(before - (await usdc(payer.address))).toBe(BigInt(charge));
    expect((await uptoRows(wallet)).length).toBe(1);
    expect(await gw.ledgerState(`upto:${wallet}`)).toEqual({ balance: 0, locked: 0 });
    await expectAuditClean();
  });

  test("a request that died between its authorization and its hold: the repair job settles it at 0, nothing moves", async () => {
    const payer = await chain.newPayer(5);
    const wallet = payer.address.toLowerCase();
    let captured: string | undefined;
    const spy = (async (input: string | URL | Request, init?: RequestInit) => {
      const req = new Request(input, init);
      captured = req.headers.get("payment-signature") ?? undefined;
      return captured ? new Response("{}", { status: 200, headers: { "content-type": "application/json" } }) : gw.fetch(req);
    }) as typeof fetch;
    await stockClient(payer, spy)(`${BASE}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "standin/echo", messages }),
    });
    const decoded = decode(captured!);
    const hold = Number(decoded.accepted.amount);
    // What the request did before it died: the authorization verified, recorded and credited; no hold taken.
    const offered = gw.services.topup.callOffer(hold, `${BASE}/v1/chat/completions`, "one call").upto!;
    await gw.services.keyless.upto.authorize(decoded, offered, hold);
    expect(await gw.ledgerState(`upto:${wallet}`)).toEqual({ balance: hold, locked: 0 });
    const before = await usdc(payer.address);
    // A hold it might still take is waited for; past the time any request takes, it was never taken.
    expect(await gw.services.keyless.upto.recover(0)).toBe(0);
    await gw.services.sql`UPDATE upto_settles SET created_at = now() - interval '1 hour' WHERE payer = ${wallet}`;
    expect(await gw.services.keyless.upto.recover(0)).toBe(1);
    expect(await uptoRows(wallet)).toEqual([{ state: "settled", max_usdc: hold, charge_usdc: 0, tx_hash: null }]);
    expect(await usdc(payer.address)).toBe(before);
    expect(await gw.ledgerState(`upto:${wallet}`)).toEqual({ balance: 0, locked: 0 });
    await expectAuditClean();
  });
});
