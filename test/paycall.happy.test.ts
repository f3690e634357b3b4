/**
 * Agents pay from the endpoint they call: an empty key's wallet is topped up by a chat call itself. Stock x402
 * clients wrapped around the official `openai` SDK (only base URL, key, wallet and the settings docs/payments.md gives) get
 * the answer in one call; the chain shows the transfer, Postgres the top-up (payer and owner), Redis the credit and
 * the charge, and `admin audit` finds the books agree.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import type { PrivateKeyAccount } from "viem/accounts";
import { auditLedger } from "../src/audit/audit.ts";
import { startChain, type DevChain } from "./helpers/chain.ts";
import { BASE, expectedCharge, startGateway, type TestGateway } from "./helpers/gateway.ts";
import { REPLY_WORDS, usageFor } from "./helpers/openaiStandin.ts";
import { decode, v1Fetch, v2Fetch, v2StockUsdtFetch } from "./helpers/x402.ts";

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

/**
 * x402-fetch 1.x copies `init.headers` by spreading it, which keeps nothing of a Headers object (what the openai SDK
 * passes): docs/payments.md's v1 set-up hands it the SDK's headers as a plain object.
 */
const v1Sdk = (paid: typeof fetch) =>
  ((url: string | URL | Request, init?: RequestInit) => {
    const headers: Record<string, string> = {};
    new Headers(init?.headers).forEach((value, name) => (headers[name] = value));
    return paid(url, { ...init, headers });
  }) as typeof fetch;

/** The openai SDK as an agent builds it: x402's fetch wrapper around the gateway. */
const sdk = (key: string, fetchFn: typeof fetch) => new OpenAI({ apiKey: key, baseURL: `${BASE}/v1`, maxRetries: 0, fetch: fetchFn });

async function topups(wallet: string) {
  return [
    ...(await gw.services.sql<{ amount_usdc: number; tx_hash: string; payer: string; reason: string }[]>`
      SELECT amount_usdc, tx_hash, payer, reason FROM credits WHERE wallet = ${wallet} AND kind = 'topup' ORDER BY id`),
  ];
}

async function usdc(who: `0x${string}`) {
  return chain.balanceOf(chain.usdc.address, who);
}

async function expectAuditClean() {
  const s = gw.services;
  const r = await auditLedger({ redis: s.redis, scripts: s.scripts, sql: s.sql, names: s.ledger.names });
  expect(r.differences).toEqual([]);
  expect(r.clean).toBe(true);
}

/** Every fetch the client makes, with what it sent and got (the SDK sees only the last). */
function recorder(inner: typeof fetch) {
  const seen: { status: number; payment: string | null; headers: Headers }[] = [];
  const f = (async (input: string | URL | Request, init?: RequestInit) => {
    const req = new Request(input, init);
    const payment = req.headers.get("payment-signature") ?? req.headers.get("x-payment");
    const res = await inner(req);
    seen.push({ status: res.status, payment, headers: res.headers });
    return res;
  }) as typeof fetch;
  return { f, seen };
}

async function expectPaid(o: { wallet: string; payer: PrivateKeyAccount; before: { payer: bigint; payTo: bigint }; receipt: string }) {
  const receipt = decode(o.receipt);
  expect(receipt).toMatchObject({ success: true, payer: o.payer.address.toLowerCase() });
  expect(receipt.transaction).toMatch(/^0x[0-9a-f]{64}$/);
  // 1 USD (the least a call tops up) moved from the payer to PAY_TO…
  expect(o.before.payer - (await usdc(o.payer.address))).toBe(1_000_000n);
  expect((await usdc(chain.payTo)) - o.before.payTo).toBe(1_000_000n);
  // …was credited to the key's owner (not the payer), and the call was charged from it.
  expect(await topups(o.wallet)).toEqual([
    { amount_usdc: 1_000_000, tx_hash: receipt.transaction, payer: o.payer.address.toLowerCase(), reason: expect.stringContaining("USDC") },
  ]);
  expect(await gw.ledgerState(o.payer.address.toLowerCase())).toEqual({ balance: 0, locked: 0 });
  expect(await gw.ledgerState(o.wallet)).toEqual({ balance: 1_000_000 - charge, locked: 0 });
  await gw.services.flusher.drain();
  const [charged] = await gw.services.sql<{ amount_usdc: number }[]>`
    SELECT amount_usdc FROM ledger_events WHERE wallet = ${o.wallet} AND type = 'charge'`;
  expect(charged?.amount_usdc).toBe(charge);
  await expectAuditClean();
}

describe("the chat 402 carries x402 terms", () => {
  test("INSUFFICIENT_BALANCE keeps the spec's body and adds x402Version, accepts and PAYMENT-REQUIRED", async () => {
    const { key } = await gw.newWallet(0);
    const res = await gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages }, { authorization: `Bearer ${key}` });
    expect(res.status).toBe(402);
    expect(res.body).toMatchObject({
      error: "INSUFFICIENT_BALANCE",
      message: "Balance cannot cover the estimated cost of this request",
      available_usdc: 0,
      topup: { endpoint: "/v1/topup", method: "POST", minimum_usd: 1 },
      x402Version: 1,
    });
    expect(res.body.required_usdc).toBeGreaterThan(0);
    expect(res.body.accepts.map((a: Record<string, unknown>) => [a.asset, a.amount, a.maxAmountRequired, a.network, a.resource])).toEqual([
      [chain.usdc.address, "1000000", "1000000", "base-sepolia", `${BASE}/v1/chat/completions`],
      [chain.usdt.address, "1000000", "1000000", "base-sepolia", `${BASE}/v1/chat/completions`],
    ]);
    const v2 = decode(res.headers.get("payment-required")!);
    expect(v2).toMatchObject({ x402Version: 2, resource: { url: `${BASE}/v1/chat/completions`, mimeType: "application/json" } });
    // v2: USDC, then USDT by x402's Permit2 flow (stock clients) ahead of the gateway's permit path.
    expect(
      v2.accepts.map((a: { network: string; asset: string; amount: string; payTo: string; extra: Record<string, unknown> }) => [
        a.network,
        a.asset,
        a.amount,
        a.payTo,
        a.extra.assetTransferMethod,
      ]),
    ).toEqual([
      ["eip155:84532", chain.usdc.address, "1000000", chain.payTo, undefined],
      ["eip155:84532", chain.usdt.address, "1000000", chain.payTo, "permit2"],
      ["eip155:84532", chain.usdt.address, "1000000", chain.payTo, "eip2612"],
    ]);
    expect(v2.extensions["payment-identifier"]).toMatchObject({ info: { required: false } });
    expect(v2.extensions.eip2612GasSponsoring).toBeDefined();
  });

  test("402 KEY_BUDGET_EXCEEDED carries no offer", async () => {
    const { key } = await gw.newWallet(5, { budget_usdc: 1 });
    const res = await gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages }, { authorization: `Bearer ${key}` });
    expect(res.status).toBe(402);
    expect(res.body.error).toBe("KEY_BUDGET_EXCEEDED");
    expect(res.body.accepts).toBeUndefined();
    expect(res.headers.get("payment-required")).toBeNull();
  });
});

describe("stock x402 clients around the openai SDK top up from the chat call", () => {
  test("@x402/fetch (v2), JSON: one SDK call pays 1 USD, is credited to the key's wallet and answered", async () => {
    const { wallet, key } = await gw.newWallet(0);
    const payer = await chain.newPayer();
    const before = { payer: await usdc(payer.address), payTo: await usdc(chain.payTo) };
    const { f, seen } = recorder(gw.fetch);
    const completion = await sdk(key, v2Fetch(f, chain, payer)).chat.completions.create({ model: "standin/echo", messages });
    expect(completion.choices[0]!.message.content).toBe(REPLY_WORDS.join(""));
    expect(seen.map((s) => [s.status, s.payment !== null])).toEqual([
      [402, false],
      [200, true],
    ]);
    await expectPaid({ wallet, payer, before, receipt: seen[1]!.headers.get("payment-response")! });
  });

  test("@x402/fetch (v2), stream: the paid retry streams the answer", async () => {
    const { wallet, key } = await gw.newWallet(0);
    const payer = await chain.newPayer();
    const before = { payer: await usdc(payer.address), payTo: await usdc(chain.payTo) };
    const { f, seen } = recorder(gw.fetch);
    const stream = await sdk(key, v2Fetch(f, chain, payer)).chat.completions.create({ model: "standin/echo", messages, stream: true });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    expect(text).toBe(REPLY_WORDS.join(""));
    await gw.services.chat.idle();
    await expectPaid({ wallet, payer, before, receipt: seen[1]!.headers.get("payment-response")! });
  });

  test("x402-fetch (v1, maxValue raised): the 402 body's terms are paid with X-PAYMENT", async () => {
    const { wallet, key } = await gw.newWallet(0);
    const payer = await chain.newPayer();
    const before = { payer: await usdc(payer.address), payTo: await usdc(chain.payTo) };
    const { f, seen } = recorder(gw.fetch);
    const completion = await sdk(key, v1Sdk(v1Fetch(f, chain, payer, 10_000_000n))).chat.completions.create({
      model: "standin/echo",
      messages,
    });
    expect(completion.choices[0]!.message.content).toBe(REPLY_WORDS.join(""));
    expect(seen.map((s) => s.status)).toEqual([402, 200]);
    await expectPaid({ wallet, payer, before, receipt: seen[1]!.headers.get("x-payment-response")! });
  });

  test("@x402/fetch (v2) with the gateway's permit scheme pays USDT (the offer's second asset) the same way", async () => {
    const { wallet, key } = await gw.newWallet(0);
    const payer = await chain.newPayer();
    const before = await chain.balanceOf(chain.usdt.address, payer.address);
    const completion = await sdk(key, v2Fetch(gw.fetch, chain, payer, "USDT")).chat.completions.create({ model: "standin/echo", messages });
    expect(completion.choices[0]!.message.content).toBe(REPLY_WORDS.join(""));
    expect(before - (await chain.balanceOf(chain.usdt.address, payer.address))).toBe(1_000_000n);
    expect(await topups(wallet)).toEqual([
      { amount_usdc: 1_000_000, tx_hash: expect.any(String), payer: payer.address.toLowerCase(), reason: "USDT x402 v2" },
    ]);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000 - charge, locked: 0 });
    await expectAuditClean();
  });

  test("stock @x402/evm pays USDT through Permit2 from the chat call, credited once to the key's wallet", async () => {
    const { wallet, key } = await gw.newWallet(0);
    const payer = await chain.newPayer();
    const before = await chain.balanceOf(chain.usdt.address, payer.address);
    const completion = await sdk(key, v2StockUsdtFetch(gw.fetch, chain, payer)).chat.completions.create({
      model: "standin/echo",
      messages,
    });
    expect(completion.choices[0]!.message.content).toBe(REPLY_WORDS.join(""));
    expect(before - (await chain.balanceOf(chain.usdt.address, payer.address))).toBe(1_000_000n);
    const rows = await topups(wallet);
    expect(rows).toEqual([
      { amount_usdc: 1_000_000, tx_hash: expect.any(String), payer: payer.address.toLowerCase(), reason: expect.any(String) },
    ]);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000 - charge, locked: 0 });
    await expectAuditClean();
  });

  test("a key with credit is served without any payment", async () => {
    const { key } = await gw.newWallet(2);
    const payer = await chain.newPayer();
    const before = await usdc(payer.address);
    const { f, seen } = recorder(gw.fetch);
    await sdk(key, v2Fetch(f, chain, payer)).chat.completions.create({ model: "standin/echo", messages });
    expect(seen.map((s) => [s.status, s.payment])).toEqual([[200, null]]);
    expect(await usdc(payer.address)).toBe(before);
  });
});

describe("the other front doors carry the offer in their own error shape", () => {
  test("/v1/responses: OpenAI's error object, x402Version and accepts beside it, PAYMENT-REQUIRED", async () => {
    const { key } = await gw.newWallet(0);
    const res = await gw.call("POST", "/v1/responses", { model: "standin/echo", input: "Say hello." }, { authorization: `Bearer ${key}` });
    expect(res.status).toBe(402);
    expect(res.body.error).toMatchObject({ code: "INSUFFICIENT_BALANCE", type: "insufficient_balance", available_usdc: 0 });
    expect(res.body.x402Version).toBe(1);
    expect(res.body.accepts[0]).toMatchObject({ amount: "1000000", resource: `${BASE}/v1/responses`, asset: chain.usdc.address });
    expect(decode(res.headers.get("payment-required")!).resource.url).toBe(`${BASE}/v1/responses`);
  });

  // An OpenAI-type provider (translated) and an Anthropic one (the request sent natively): one offer, one payment path.
  test.each(["standin/echo", "claude/claude-sonnet-4-5"])(
    "/v1/messages to %s: Anthropic's error, x402 terms beside it; a paid retry is answered",
    async (model) => {
      const { wallet, key } = await gw.newWallet(0);
      const body = { model, max_tokens: 100, messages: [{ role: "user", content: "Say hello." }] };
      const res = await gw.call("POST", "/v1/messages", body, { "x-api-key": key });
      expect(res.status).toBe(402);
      expect(res.body).toMatchObject({ type: "error", error: { type: "billing_error" }, x402Version: 1 });
      expect(res.body.accepts[0]).toMatchObject({ amount: "1000000", resource: `${BASE}/v1/messages` });
      expect(decode(res.headers.get("payment-required")!).accepts).toHaveLength(3);

      const payer = await chain.newPayer();
      const paid = await v2Fetch(
        gw.fetch,
        chain,
        payer,
      )(`${BASE}/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": key },
        body: JSON.stringify(body),
      });
      expect(paid.status).toBe(200);
      expect((await paid.json()).type).toBe("message");
      expect(decode(paid.headers.get("payment-response")!)).toMatchObject({ success: true });
      const state = await gw.ledgerState(wallet);
      expect(state.locked).toBe(0);
      expect(state.balance).toBeGreaterThan(900_000);
      expect(state.balance).toBeLessThan(1_000_000);
      await expectAuditClean();
    },
  );
});

describe("discovery and browsers", () => {
  test("GET /.well-known/x402 lists the payable resources with advisory terms", async () => {
    for (const path of ["/.well-known/x402", "/.well-known/x402.json"]) {
      const res = await gw.call("GET", path);
      expect(res.status).toBe(200);
      const urls = ["/v1/topup", "/v1/chat/completions", "/v1/responses", "/v1/messages"].map((p) => BASE + p);
      expect(res.body).toMatchObject({ version: 1, resources: urls, x402Version: 2 });
      expect(res.body.items.map((i: { resource: { url: string } }) => i.resource.url)).toEqual(urls);
      expect(res.body.items[1]).toMatchObject({ type: "http", input: { method: "POST", routeTemplate: "/v1/chat/completions" } });
      expect(res.body.items[1].accepts.map((a: { network: string; amount: string }) => [a.network, a.amount])).toEqual([
        ["eip155:84532", "1000000"],
        ["eip155:84532", "1000000"],
        ["eip155:84532", "1000000"],
      ]);
    }
  });

  test("payment URLs come from PUBLIC_URL, never from the request's Host (a cache could serve them to others)", async () => {
    const { key } = await gw.newWallet(0);
    const evil = "https://evil.example";
    const manifest = await gw.handle(new Request(`${evil}/.well-known/x402`, { headers: { host: "evil.example" } }));
    const text = await manifest.text();
    expect(text).not.toContain("evil.example");
    expect(JSON.parse(text).resources[0]).toBe(`${BASE}/v1/topup`);
    const terms = await gw.handle(
      new Request(`${evil}/v1/chat/completions`, {
        method: "POST",
        headers: { host: "evil.example", "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify({ model: "standin/echo", messages: [{ role: "user", content: "hi" }] }),
      }),
    );
    expect(terms.status).toBe(402);
    const body = await terms.json();
    expect(body.accepts[0].resource).toBe(`${BASE}/v1/chat/completions`);
    expect(decode(terms.headers.get("payment-required")!).resource.url).toBe(`${BASE}/v1/chat/completions`);
    const topup = await gw.handle(
      new Request(`${evil}/v1/topup`, {
        method: "POST",
        headers: { host: "evil.example", "content-type": "application/json" },
        body: JSON.stringify({ amount: 1 }),
      }),
    );
    expect(topup.status).toBe(402);
    expect(JSON.stringify(await topup.json())).not.toContain("evil.example");
  });

  test("a preflight lets a page send the payment headers x402's wrappers set", async () => {
    const res = await gw.handle(
      new Request(`${BASE}/v1/chat/completions`, {
        method: "OPTIONS",
        headers: {
          origin: "https://app.example",
          "access-control-request-method": "POST",
          "access-control-request-headers": "authorization,content-type,payment-signature,x-payment,access-control-expose-headers",
        },
      }),
    );
    expect(res.status).toBe(204);
    const allowed = res.headers.get("access-control-allow-headers")!.toLowerCase();
    for (const h of ["payment-signature", "x-payment", "access-control-expose-headers"]) expect(allowed).toContain(h);
    const exposed = res.headers.get("access-control-expose-headers")!.toLowerCase();
    for (const h of ["payment-required", "payment-response", "x-payment-response"]) expect(exposed).toContain(h);
  });
});
