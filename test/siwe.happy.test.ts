/** Sign-in discovery: a client builds an acceptable SIWE message from GET /v1/auth/siwe alone. */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { createSiweMessage } from "viem/siwe";
import { loadConfig } from "../src/config.ts";
import { startGateway, type TestGateway } from "./helpers/gateway.ts";

let gw: TestGateway;
let local: TestGateway;
beforeAll(async () => {
  gw = await startGateway();
  // No SIWE_DOMAIN in local mode: the domain is localhost:PORT, and its other loopback spellings are accepted too.
  local = await startGateway({ SIWE_DOMAIN: "", PORT: "8080", SIWE_CHAIN_IDS: "" });
}, 90_000);
afterAll(async () => {
  await gw?.close();
  await local?.close();
});

/** What a client does: ask for the parameters, build the message from them only, sign it. */
async function signInFrom(g: TestGateway, origin: string) {
  const res = await g.handle(new Request(`${origin}/v1/auth/siwe`));
  expect(res.status).toBe(200);
  expect(res.headers.get("cache-control")).toBe("no-store");
  const p = await res.json();
  const account = privateKeyToAccount(generatePrivateKey());
  const message = createSiweMessage({
    domain: p.domain,
    uri: p.uri,
    version: p.version,
    chainId: p.chain_ids[0],
    nonce: p.nonce,
    statement: p.statement ?? undefined,
    issuedAt: new Date(),
    expirationTime: p.expiration_max_s === null ? undefined : new Date(Date.now() + p.expiration_max_s * 1000),
    address: account.address,
  });
  const signature = await account.signMessage({ message });
  const created = await g.handle(
    new Request(`${origin}/v1/auth/keys`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ message, signature, label: "discovered" }),
    }),
  );
  return { params: p, account, status: created.status, body: await created.json() };
}

describe("GET /v1/auth/siwe", () => {
  test("answers the rules and a fresh nonce, without authentication", async () => {
    const a = await gw.call("GET", "/v1/auth/siwe");
    const b = await gw.call("GET", "/v1/auth/siwe");
    expect(a.status).toBe(200);
    expect(a.body).toEqual({
      domain: "gateway.test",
      uri: "https://gateway.test",
      version: "1",
      chain_ids: [1, 8453],
      nonce: expect.stringMatching(/^[A-Za-z0-9]{8,}$/),
      statement: null,
      issued_at_max_age_s: 600,
      clock_skew_s: 60,
      expiration_max_s: null,
    });
    expect(b.body.nonce).not.toBe(a.body.nonce);
  });

  test("a sign-in built only from its answer creates a key that works", async () => {
    const r = await signInFrom(gw, "https://gateway.test");
    expect(r.status).toBe(201);
    expect(r.body.key).toMatch(/^sk-[0-9a-f]{64}$/);
    const wallet = r.account.address.toLowerCase();
    await gw.grant(wallet, 1_000_000);
    const chat = await gw
      .openai(r.body.key)
      .chat.completions.create({ model: "standin/echo", messages: [{ role: "user", content: "hi" }] });
    expect(chat.choices[0]!.message.content).toBe("Hello from the stand-in");
    expect(chat.model).toBe("standin/echo");
  });

  test("local mode: localhost and 127.0.0.1 are each offered and accepted", async () => {
    expect(local.services.config.siweDomains).toEqual(["localhost:8080", "127.0.0.1:8080"]);
    for (const origin of ["http://localhost:8080", "http://127.0.0.1:8080"]) {
      const r = await signInFrom(local, origin);
      expect(r.params).toMatchObject({ domain: new URL(origin).host, uri: origin, chain_ids: [84532] });
      expect(r.status).toBe(201);
    }
    // Reached by another name (an IPv6 literal, which EIP-4361 libraries refuse as a domain), the configured domain
    // is offered, and it works.
    for (const origin of ["http://gateway.internal:8080", "http://[::1]:8080"]) {
      const r = await signInFrom(local, origin);
      expect(r.params).toMatchObject({ domain: "localhost:8080", uri: "http://localhost:8080" });
      expect(r.status).toBe(201);
    }
  });

  test("outside local mode a loopback domain has one spelling only", () => {
    const c = loadConfig({
      DEPLOYMENT: "staging",
      SIWE_DOMAIN: "localhost:8080",
      PAY_TO: "0x" + "1".repeat(40),
      FACILITATOR_URL: "https://facilitator.example",
      LOG_LEVEL: "error",
    });
    expect(c.siweDomains).toEqual(["localhost:8080"]);
  });
});
