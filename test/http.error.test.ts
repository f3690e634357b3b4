/**
 * Requests that real clients send slightly wrong: every one gets the spec's error shape (or is served, where the
 * intent is clear), and none changes anything.
 */
import { describe, expect, test } from "bun:test";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { usageFor } from "./helpers/openaiStandin.ts";

const gw = sharedGateway();

const messages = [{ role: "user", content: "hi" }];
const chatBody = JSON.stringify({ model: "standin/echo", messages });
const usage = usageFor(1);

function chat(headers: Record<string, string>, body: BodyInit = chatBody) {
  return gw.handle(new Request("https://gateway.test/v1/chat/completions", { method: "POST", headers, body }));
}

async function keyRevoked(keyId: number): Promise<boolean> {
  const [r] = await gw.services.sql<{ revoked: boolean }[]>`SELECT revoked_at IS NOT NULL AS revoked FROM api_keys WHERE id = ${keyId}`;
  return r!.revoked;
}

describe("bodies", () => {
  test("a JSON body sent as text/plain (fetch's default) or without Content-Type is served and charged", async () => {
    const { wallet, key } = await gw.newWallet(1);
    for (const contentType of ["text/plain;charset=UTF-8", undefined]) {
      const headers: Record<string, string> = { authorization: `Bearer ${key}` };
      if (contentType) headers["content-type"] = contentType;
      const res = await chat(headers);
      expect(res.status).toBe(200);
      expect((await res.json()).choices[0].message.content).toBe("Hello from the stand-in");
    }
    await gw.services.chat.idle();
    expect(await gw.ledgerState(wallet)).toEqual({
      balance: 1_000_000 - 2 * expectedCharge(usage.prompt_tokens, usage.completion_tokens),
      locked: 0,
    });
  });

  test("empty, malformed and non-object bodies: 400 VALIDATION_ERROR, nothing held", async () => {
    const { wallet, key } = await gw.newWallet(1);
    for (const body of ["", "{bad", "null", "[1,2]"]) {
      const res = await chat({ authorization: `Bearer ${key}`, "content-type": "application/json" }, body);
      expect(res.status).toBe(400);
      expect((await res.json()).error).toBe("VALIDATION_ERROR");
    }
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
  });

  test("a body over the size limit (32 MiB by default) is refused 413 by its Content-Length before it is read", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const limit = 32 * 1024 * 1024;
    expect(gw.services.config.maxBodyBytes).toBe(limit);
    const res = await chat(
      { authorization: `Bearer ${key}`, "content-type": "application/json", "content-length": String(limit + 1) },
      "{}",
    );
    expect(res.status).toBe(413);
    expect(res.headers.get("connection")).toBe("close");
    expect(await res.json()).toEqual({ error: "PAYLOAD_TOO_LARGE", message: `Request body too large (at most ${limit} bytes)` });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
  });
});

describe("credentials", () => {
  test("the Bearer scheme is case-insensitive", async () => {
    const { key } = await gw.newWallet(1);
    expect((await chat({ authorization: `bearer ${key}` })).status).toBe(200);
    expect((await chat({ authorization: `BEARER ${key}` })).status).toBe(200);
    expect((await chat({ authorization: `Basic ${key}` })).status).toBe(401);
  });

  test("missing or oversized SIWE fields are 401 (not 400) on create and revoke; nothing changes", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const signed = await gw.signIn(account);
    for (const body of [{}, { ...signed, signature: `0x${"ab".repeat(200)}` }, { ...signed, message: "x".repeat(5000) }]) {
      const res = await gw.call("POST", "/v1/auth/keys", body);
      expect(res.status).toBe(401);
      expect(res.body.error).toBe("UNAUTHORIZED");
    }
    const { keyId } = await gw.newWallet(1);
    const noBody = await gw.handle(new Request(`https://gateway.test/v1/auth/keys/${keyId}`, { method: "DELETE" }));
    expect(noBody.status).toBe(401);
    expect((await noBody.json()).error).toBe("UNAUTHORIZED");
    expect(await keyRevoked(keyId)).toBe(false);
  });

  test("a key id that is not a positive integer within range: 400, nothing revoked", async () => {
    const { account, keyId } = await gw.newWallet(1);
    for (const id of ["99999999999999999999", "1e0", "-1", "0", `${keyId}.0`]) {
      const res = await gw.call("DELETE", `/v1/auth/keys/${id}`, await gw.signIn(account));
      expect(res.status).toBe(400);
      expect(res.body.error).toBe("VALIDATION_ERROR");
    }
    expect(await keyRevoked(keyId)).toBe(false);
  });
});
