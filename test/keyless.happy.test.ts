/**
 * A wallet and nothing else: a model request without a key answers 402 with x402 v2 terms for its hold; the stock x402
 * client (`@x402/fetch` + `@x402/evm`) around the official openai SDK, given no key (a fetch that drops the
 * Authorization header the SDK insists on), pays `exact` and gets the answer, the remainder kept as the payer's balance;
 * SIWx (sign-in-with-x) then spends that balance. The chain, the ledger and `admin audit` agree after each.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { createSiweMessage } from "viem/siwe";
import type { PrivateKeyAccount } from "viem/accounts";
import { auditLedger } from "../src/audit/audit.ts";
import { startChain, type DevChain } from "./helpers/chain.ts";
import { BASE, expectedCharge, startGateway, type TestGateway } from "./helpers/gateway.ts";
import { usageFor } from "./helpers/openaiStandin.ts";
import { decode, encode, v2Fetch } from "./helpers/x402.ts";

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
const withoutKey =
  (inner: typeof fetch, extra: Record<string, string> = {}) =>
  (input: string | URL | Request, init?: RequestInit) => {
    const req = new Request(input, init);
    req.headers.delete("authorization");
    for (const [k, v] of Object.entries(extra)) req.headers.set(k, v);
    return inner(req);
  };

const sdk = (fetchFn: (input: string | URL | Request, init?: RequestInit) => Promise<Response>) =>
  new OpenAI({ apiKey: "unused", baseURL: `${BASE}/v1`, maxRetries: 0, fetch: fetchFn as typeof fetch });

const usdc = (who: `0x${string}`) => chain.balanceOf(chain.usdc.address, who);

async function expectAuditClean() {
  const s = gw.services;
  await s.flusher.drain();
  const r = await auditLedger({ redis: s.redis, scripts: s.scripts, sql: s.sql, names: s.ledger.names });
  expect(r.differences).toEqual([]);
  expect(r.clean).toBe(true);
}

/** The hold of this request: what the 402 asks. */
async function holdOf(body: unknown = { model: "standin/echo", messages }): Promise<number> {
  const res = await gw.call("POST", "/v1/chat/completions", body);
  expect(res.status).toBe(402);
  return res.body.required_usdc;
}

/** A SIGN-IN-WITH-X header answering the challenge of a 402, signed by `account`; `over` changes the signed fields. */
async function signInWithX(account: PrivateKeyAccount, over: Record<string, unknown> = {}): Promise<string> {
  const res = await gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages });
  const ext = decode(res.headers.get("payment-required")!).extensions["sign-in-with-x"];
  const fields = { ...ext.info, address: account.address, chainId: ext.supportedChains[0].chainId, type: "eip191", ...over };
  const message = createSiweMessage({
    domain: fields.domain,
    address: fields.address,
    statement: fields.statement,
    uri: fields.uri,
    version: "1",
    chainId: Number(String(fields.chainId).split(":")[1]),
    nonce: fields.nonce,
    issuedAt: new Date(fields.issuedAt),
    expirationTime: fields.expirationTime ? new Date(fields.expirationTime) : undefined,
    resources: fields.resources,
  });
  return encode({ ...fields, signature: await account.signMessage({ message }) });
}

describe("a model request without a key", () => {
  test("answers 402 PAYMENT_REQUIRED with x402 v2 terms for its hold: upto and exact USDC, sign-in-with-x and payment-identifier", async () => {
    const res = await gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages });
    expect(res.status).toBe(402);
    expect(res.body).toMatchObject({ error: "PAYMENT_REQUIRED", x402Version: 1 });
    expect(res.body.message).toContain("EIP-3009");
    expect(res.body.message).toContain("Permit2");
    expect(res.body.message).toContain("SIGN-IN-WITH-X");
    const hold = res.body.required_usdc;
    expect(hold).toBeGreaterThan(charge);
    const v2 = decode(res.headers.get("payment-required")!);
    expect(v2.x402Version).toBe(2);
    expect(v2.resource.url).toBe(`${BASE}/v1/chat/completions`);
    expect(v2.accepts.map((a: Record<string, string>) => [a.scheme, a.asset, a.amount, a.network])).toEqual([
      ["upto", chain.usdc.address, String(hold), `eip155:${chain.chainId}`],
      ["exact", chain.usdc.address, String(hold), `eip155:${chain.chainId}`],
    ]);
    expect(Object.keys(v2.extensions).sort()).toEqual(["eip2612GasSponsoring", "payment-identifier", "sign-in-with-x"]);
    const siwx = v2.extensions["sign-in-with-x"];
    expect(siwx.info).toMatchObject({ domain: "gateway.test", uri: `${BASE}/v1/chat/completions`, version: "1" });
    expect(siwx.info.nonce).toMatch(/^[0-9a-f]{32}$/);
    expect(siwx.supportedChains).toEqual([{ chainId: `eip155:${chain.chainId}`, type: "eip191" }]);
    // The body of the Responses door is OpenAI's error, of the Messages door Anthropic's; both carry the same terms.
    const responses = await gw.call("POST", "/v1/responses", { model: "standin/echo", input: "Say hello." });
    expect(responses.status).toBe(402);
    expect(responses.body.error).toMatchObject({ code: "PAYMENT_REQUIRED", type: "insufficient_balance" });
    expect(decode(responses.headers.get("payment-required")!).accepts[0].scheme).toBe("upto");
    const msgs = await gw.call("POST", "/v1/messages", { model: "standin/echo", max_tokens: 64, messages });
    expect(msgs.status).toBe(402);
    expect(msgs.body.type).toBe("error");
    expect(decode(msgs.headers.get("payment-required")!).accepts[0].scheme).toBe("upto");
  });

  test("a bad request is refused as with a key, before any terms", async () => {
    const res = await gw.call("POST", "/v1/chat/completions", { model: "nope/nothing", messages });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe("UNKNOWN_MODEL");
  });
});

describe("exact, then SIWx", () => {
  test("stock @x402/fetch pays exact for the hold; the call is charged from it and the rest stays the payer's balance", async () => {
    const payer = await chain.newPayer(5);
    const wallet = payer.address.toLowerCase();
    const hold = await holdOf();
    const before = { payer: await usdc(payer.address), payTo: await usdc(chain.payTo) };
    const { data, response } = await sdk(v2Fetch(withoutKey(gw.fetch) as typeof fetch, chain, payer))
      .chat.completions.create({ model: "standin/echo", messages })
      .withResponse();
    expect(data.choices[0]!.message.content).toBeTruthy();
    const receipt = decode(response.headers.get("payment-response")!);
    expect(receipt).toMatchObject({ success: true, payer: wallet });
    expect(before.payer - (await usdc(payer.address))).toBe(BigInt(hold));
    expect((await usdc(chain.payTo)) - before.payTo).toBe(BigInt(hold));
    expect(await gw.ledgerState(wallet)).toEqual({ balance: hold - charge, locked: 0 });
    const balance = await gw.call("GET", `/v1/balance/${wallet}`);
    expect(balance.body.available_usdc).toBe(hold - charge);
    await expectAuditClean();

    // The remainder, spent by signing in with the wallet (no key, no payment), until it cannot cover a hold.
    const signedIn = await sdk(withoutKey(gw.fetch, { "sign-in-with-x": await signInWithX(payer) })).chat.completions.create({
      model: "standin/echo",
      messages,
      max_tokens: 8,
    });
    expect(signedIn.choices[0]!.message.content).toBeTruthy();
    const after = await gw.ledgerState(wallet);
    expect(after.locked).toBe(0);
    expect(hold - charge - after.balance).toBeGreaterThan(0);
    await expectAuditClean();
    // Short of credit (a hold far above the rest): the 402 with the terms again, nothing charged.
    const short = await gw.call(
      "POST",
      "/v1/chat/completions",
      { model: "standin/echo", messages, max_tokens: 4000 },
      { "sign-in-with-x": await signInWithX(payer) },
    );
    expect(short.status).toBe(402);
    expect(short.body.error).toBe("PAYMENT_REQUIRED");
    expect(short.headers.get("payment-required")).toBeTruthy();
    expect(await gw.ledgerState(wallet)).toEqual(after);
  });

  test("the same PAYMENT-SIGNATURE serves once: sent again it is 402 PAYMENT_ALREADY_USED with no offer, and no money moves", async () => {
    const payer = await chain.newPayer(5);
    let sent: string | undefined;
    const spy = (async (input: string | URL | Request, init?: RequestInit) => {
      const req = new Request(input, init);
      sent ??= req.headers.get("payment-signature") ?? undefined;
      return gw.fetch(req);
    }) as typeof fetch;
    await sdk(v2Fetch(withoutKey(spy) as typeof fetch, chain, payer)).chat.completions.create({ model: "standin/echo", messages });
    expect(sent).toBeTruthy();
    const wallet = payer.address.toLowerCase();
    const state = await gw.ledgerState(wallet);
    const onChain = await usdc(payer.address);
    const again = await gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages }, { "payment-signature": sent! });
    expect([again.status, again.body.error]).toEqual([402, "PAYMENT_ALREADY_USED"]);
    expect(again.body.message).toStartWith("This payment was already used (");
    expect(again.body.message).toContain("The credit it bought is in the payer's wallet");
    expect(await gw.ledgerState(wallet)).toEqual(state);
    expect(await usdc(payer.address)).toBe(onChain);
    await expectAuditClean();
  });
});

describe("SIWx refusals: 401, nothing charged", () => {
  test("bad signature, another domain or uri, expired, reused nonce", async () => {
    const payer = await chain.newPayer(5);
    const wallet = payer.address.toLowerCase();
    await gw.grant(wallet, 1_000_000);
    const state = await gw.ledgerState(wallet);
    const other = await chain.newPayer(0);
    const call = (header: string) =>
      gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages }, { "sign-in-with-x": header });
    const forged = { ...decode(await signInWithX(other)), address: payer.address };
    const cases: [string, string][] = [
      ["signature", encode(forged)],
      ["domain", await signInWithX(payer, { domain: "evil.test" })],
      ["uri", await signInWithX(payer, { uri: "https://evil.test/v1/chat/completions" })],
      ["expired", await signInWithX(payer, { issuedAt: new Date(Date.now() - 3_600_000).toISOString(), expirationTime: undefined })],
    ];
    for (const [what, header] of cases) {
      const res = await call(header);
      expect([what, res.status, res.body.error]).toEqual([what, 401, "UNAUTHORIZED"]);
      expect(res.body.message).toMatch(/^SIWx rejected: /);
    }
    const header = await signInWithX(payer);
    expect((await call(header)).status).toBe(200);
    const spent = await gw.ledgerState(wallet);
    const reused = await call(header);
    expect([reused.status, reused.body.error]).toEqual([401, "UNAUTHORIZED"]);
    expect(await gw.ledgerState(wallet)).toEqual(spent);
    expect(spent.balance).toBeLessThan(state.balance);
    await expectAuditClean();
  });
});

describe("payment-identifier on a call without a key", () => {
  /** A stock client's PAYMENT-SIGNATURE for this call, made but not sent, with a payment-identifier id added. */
  async function signedWithId(payer: PrivateKeyAccount, id: string): Promise<string> {
    let captured: string | undefined;
    const spy = (async (input: string | URL | Request, init?: RequestInit) => {
      const req = new Request(input, init);
      const sig = req.headers.get("payment-signature");
      if (sig) {
        captured = sig;
        return new Response("{}", { status: 200, headers: { "content-type": "application/json" } });
      }
      return gw.fetch(req);
    }) as typeof fetch;
    await v2Fetch(
      spy,
      chain,
      payer,
    )(`${BASE}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "standin/echo", messages }),
    });
    const decoded = decode(captured!);
    return encode({ ...decoded, extensions: { ...decoded.extensions, "payment-identifier": { info: { id } } } });
  }

  test("the same payload again gets the first answer (no payment, no charge); another payload under the id is 409", async () => {
    const payer = await chain.newPayer(5);
    const wallet = payer.address.toLowerCase();
    const id = `keyless-${crypto.randomUUID()}`;
    const header = await signedWithId(payer, id);
    const first = await gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages }, { "payment-signature": header });
    expect(first.status).toBe(200);
    expect(decode(first.headers.get("payment-response")!)).toMatchObject({ success: true, payer: wallet });
    const state = await gw.ledgerState(wallet);
    const onChain = await usdc(payer.address);
    const again = await gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages }, { "payment-signature": header });
    expect(again.status).toBe(200);
    expect(again.body).toEqual(first.body);
    expect(again.headers.get("payment-response")).toBe(first.headers.get("payment-response"));
    expect(await gw.ledgerState(wallet)).toEqual(state);
    expect(await usdc(payer.address)).toBe(onChain);
    const other = await signedWithId(payer, id);
    const conflict = await gw.call("POST", "/v1/chat/completions", { model: "standin/echo", messages }, { "payment-signature": other });
    expect([conflict.status, conflict.body.error]).toEqual([409, "CONFLICT"]);
    expect(await gw.ledgerState(wallet)).toEqual(state);
    expect(await usdc(payer.address)).toBe(onChain);
    await expectAuditClean();
  });
});
