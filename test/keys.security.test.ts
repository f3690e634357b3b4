import { describe, expect, test } from "bun:test";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { sharedGateway, startGateway } from "./helpers/gateway.ts";

const gw = sharedGateway();

const newAccount = () => privateKeyToAccount(generatePrivateKey());
const minutes = (n: number) => new Date(Date.now() + n * 60_000);

async function keyCount(wallet: string): Promise<number> {
  const [r] = await gw.services.sql<{ n: number }[]>`SELECT COUNT(*)::int AS n FROM api_keys WHERE wallet = ${wallet}`;
  return r!.n;
}

describe("SIWE on key creation", () => {
  test("a valid message creates a key once, with no-store; the plaintext never appears again", async () => {
    const account = newAccount();
    const res = await gw.call("POST", "/v1/auth/keys", { ...(await gw.signIn(account)), label: "ci" });
    expect(res.status).toBe(201);
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(res.body.key).toMatch(/^sk-[0-9a-f]{64}$/);
    const { id, key, label, created_at } = res.body;
    expect(typeof id).toBe("number");
    expect(label).toBe("ci");
    expect(new Date(created_at).getTime()).toBeGreaterThan(Date.now() - 60_000);

    const list = await gw.call("GET", `/v1/auth/keys?${new URLSearchParams(await gw.signIn(account))}`);
    expect(list.status).toBe(200);
    expect(list.body).toEqual({ data: [{ id, label: "ci", created_at, revoked_at: null, models: null, requests_per_minute: null }] });
    expect(JSON.stringify(list.body)).not.toContain(key);
    // Only the SHA-256 is stored.
    const [row] = await gw.services.sql`SELECT key_hash FROM api_keys WHERE id = ${id}`;
    expect(row!.key_hash).toBe(new Bun.CryptoHasher("sha256").update(key).digest("hex"));
  });

  // Each 401 names the rule that failed, so a client author is not left guessing (the reason was once only logged).
  const rejected: [string, RegExp, (a: ReturnType<typeof newAccount>) => Promise<{ message: string; signature: string }>][] = [
    [
      "wrong domain",
      /^SIWE rejected: domain: must be "gateway\.test"$/,
      (a) => gw.signIn(a, { domain: "evil.test", uri: "https://evil.test" }),
    ],
    [
      "uri on another origin",
      /^SIWE rejected: uri: must be on the message's domain/,
      (a) => gw.signIn(a, { uri: "https://evil.test/login" }),
    ],
    ["expired", /^SIWE rejected: expired: /, (a) => gw.signIn(a, { issuedAt: minutes(-5), expirationTime: minutes(-1) })],
    [
      "issued too long ago",
      /^SIWE rejected: issued too long ago: Issued At is more than 600 s old/,
      (a) => gw.signIn(a, { issuedAt: minutes(-11) }),
    ],
    ["issuedAt in the future", /^SIWE rejected: not yet valid: Issued At /, (a) => gw.signIn(a, { issuedAt: minutes(5) })],
    ["notBefore in the future", /^SIWE rejected: not yet valid: Not Before /, (a) => gw.signIn(a, { notBefore: minutes(5) })],
    ["chain not allowed", /^SIWE rejected: chain: Chain ID must be one of 1, 8453$/, (a) => gw.signIn(a, { chainId: 10 })],
    [
      "short nonce",
      /^SIWE rejected: nonce: /,
      async (a) => {
        const message = gw.siweMessage(a, { nonce: "abcdefgh" }).replace("Nonce: abcdefgh", "Nonce: abc12");
        return { message, signature: await a.signMessage({ message }) };
      },
    ],
    [
      "tampered message",
      /^SIWE rejected: signature: not signed by the message's address$/,
      async (a) => {
        const s = await gw.signIn(a);
        return { ...s, message: s.message.replace("Sign in to the gateway", "Sign in to the gateway!") };
      },
    ],
    [
      "signed by another wallet",
      /^SIWE rejected: signature: not signed by the message's address$/,
      async (a) => {
        const message = gw.siweMessage(a);
        return { message, signature: await newAccount().signMessage({ message }) };
      },
    ],
    [
      "a line the grammar does not know",
      /^SIWE rejected: malformed: not in canonical EIP-4361 form/,
      async (a) => {
        const message = gw.siweMessage(a) + "\nRedirect: https://evil.test";
        return { message, signature: await a.signMessage({ message }) };
      },
    ],
    [
      "garbage signature",
      /^SIWE rejected: signature: not 65 bytes of 0x-prefixed hex$/,
      async (a) => ({ message: gw.siweMessage(a), signature: "0x1234" }),
    ],
    [
      "version 2",
      /^SIWE rejected: version: must be "1"$/,
      async (a) => {
        const message = gw.siweMessage(a).replace("Version: 1", "Version: 2");
        return { message, signature: await a.signMessage({ message }) };
      },
    ],
    [
      "not a SIWE message",
      /^SIWE rejected: malformed: /,
      async (a) => ({ message: "hello", signature: await a.signMessage({ message: "hello" }) }),
    ],
    ["no signature", /^SIWE rejected: message and signature are required$/, async (a) => ({ message: gw.siweMessage(a) }) as never],
  ];
  for (const [name, reason, make] of rejected) {
    test(`401 for ${name}, naming the rule, and no key is created`, async () => {
      const account = newAccount();
      const creds = await make(account);
      const res = await gw.call("POST", "/v1/auth/keys", creds);
      expect(res.status).toBe(401);
      expect(res.body.error).toBe("UNAUTHORIZED");
      expect(res.body.message).toMatch(reason);
      // The answer never echoes the credentials or the signer.
      const text = JSON.stringify(res.body);
      expect(text).not.toContain(account.address.slice(2, 12));
      if (creds.signature) expect(text).not.toContain(creds.signature.slice(2, 20));
      expect(await keyCount(account.address.toLowerCase())).toBe(0);
    });
  }

  test("a message is accepted once on POST; reusing it is 401", async () => {
    const account = newAccount();
    const creds = await gw.signIn(account);
    expect((await gw.call("POST", "/v1/auth/keys", creds)).status).toBe(201);
    const again = await gw.call("POST", "/v1/auth/keys", creds);
    expect(again).toMatchObject({ status: 401, body: { error: "UNAUTHORIZED" } });
    expect(again.body.message).toMatch(/^SIWE rejected: replayed: this message was used before/);
    expect(await keyCount(account.address.toLowerCase())).toBe(1);
  });

  test("after a rebuild of a lost Redis (whose replay guard went with it) a message signed before it cannot mint a key", async () => {
    const account = newAccount();
    const before = await gw.signIn(account, { issuedAt: new Date(Date.now() - 60_000) });
    await gw.services.redis.set(gw.services.ledger.names.ready, new Date(Date.now() - 30_000).toISOString()); // rebuilt 30 s ago
    const res = await gw.call("POST", "/v1/auth/keys", before);
    expect(res).toMatchObject({ status: 401, body: { error: "UNAUTHORIZED" } });
    expect(res.body.message).toMatch(/^SIWE rejected: replayed: signed before the ledger was rebuilt/);
    expect(await keyCount(account.address.toLowerCase())).toBe(0);
    expect((await gw.call("POST", "/v1/auth/keys", await gw.signIn(account))).status).toBe(201);
  });

  test("a message seen on GET (e.g. leaked from a query string) cannot mint a key; GET may reuse it", async () => {
    const account = newAccount();
    const creds = await gw.signIn(account);
    const q = new URLSearchParams(creds).toString();
    expect((await gw.call("GET", `/v1/auth/keys?${q}`)).status).toBe(200);
    expect((await gw.call("GET", `/v1/auth/keys?${q}`)).status).toBe(200);
    expect((await gw.call("POST", "/v1/auth/keys", creds)).status).toBe(401);
    expect(await keyCount(account.address.toLowerCase())).toBe(0);
  });

  test("GET without credentials is 401", async () => {
    expect(await gw.call("GET", "/v1/auth/keys")).toMatchObject({ status: 401, body: { error: "UNAUTHORIZED" } });
  });

  test("ref_code together with redeem_code is 400 and creates nothing", async () => {
    const account = newAccount();
    const res = await gw.call("POST", "/v1/auth/keys", { ...(await gw.signIn(account)), ref_code: "a", redeem_code: "b" });
    expect(res).toMatchObject({ status: 400, body: { error: "VALIDATION_ERROR" } });
    expect(await keyCount(account.address.toLowerCase())).toBe(0);
  });
});

describe("revocation and wallet scoping", () => {
  test("revoke takes effect on the very next request", async () => {
    const { account, wallet, key, keyId } = await gw.newWallet(1);
    const body = { model: "standin/echo", messages: [{ role: "user", content: "hi" }] };
    const headers = { authorization: `Bearer ${key}` };
    expect((await gw.call("POST", "/v1/chat/completions", body, headers)).status).toBe(200);
    const before = await gw.ledgerState(wallet);

    const del = await gw.call("DELETE", `/v1/auth/keys/${keyId}`, await gw.signIn(account));
    expect(del).toMatchObject({ status: 200, body: { revoked: true } });

    expect(await gw.call("POST", "/v1/chat/completions", body, headers)).toMatchObject({ status: 401, body: { error: "UNAUTHORIZED" } });
    expect(await gw.call("GET", `/v1/usage/${wallet}`, undefined, headers)).toMatchObject({ status: 401 });
    expect(await gw.ledgerState(wallet)).toEqual(before);

    const list = await gw.call("GET", `/v1/auth/keys?${new URLSearchParams(await gw.signIn(account))}`);
    expect(list.body.data[0].revoked_at).toEqual(expect.any(String));
  });

  test("revoking another wallet's key is 404 and leaves it active", async () => {
    const victim = await gw.newWallet(1);
    const attacker = newAccount();
    const res = await gw.call("DELETE", `/v1/auth/keys/${victim.keyId}`, await gw.signIn(attacker));
    expect(res).toMatchObject({ status: 404, body: { error: "NOT_FOUND" } });
    const chat = await gw.call(
      "POST",
      "/v1/chat/completions",
      { model: "standin/echo", messages: [{ role: "user", content: "x" }] },
      {
        authorization: `Bearer ${victim.key}`,
      },
    );
    expect(chat.status).toBe(200);
  });

  test("usage of a wallet with another wallet's key or SIWE is 401", async () => {
    const a = await gw.newWallet(1);
    const b = await gw.newWallet(1);
    expect(await gw.call("GET", `/v1/usage/${a.wallet}`, undefined, { authorization: `Bearer ${b.key}` })).toMatchObject({
      status: 401,
      body: { error: "UNAUTHORIZED" },
    });
    const q = new URLSearchParams(await gw.signIn(b.account));
    expect(await gw.call("GET", `/v1/usage/${a.wallet}?${q}`)).toMatchObject({ status: 401 });
    expect(await gw.call("GET", `/v1/usage/${a.wallet}`)).toMatchObject({ status: 401 });
  });
});

describe("SIWE nonces", () => {
  test("GET /v1/auth/siwe's nonces are unpredictable: no part of one is in the next", async () => {
    const nonces: string[] = [];
    for (let i = 0; i < 50; i++) nonces.push((await gw.call("GET", "/v1/auth/siwe")).body.nonce);
    expect(new Set(nonces).size).toBe(nonces.length);
    for (let i = 1; i < nonces.length; i++) {
      const [a, b] = [nonces[i - 1]!, nonces[i]!];
      expect(a).toMatch(/^[A-Za-z0-9]{32,}$/); // 128 bits at least (hex) — EIP-4361 asks 8+ alphanumerics
      // viem's nonces (Math.random, through a shared buffer) were the one before shifted by a character: no run of
      // 12 characters of one may appear in the next (48 bits: chance never does it).
      const shared = Array.from({ length: a.length - 11 }, (_, k) => a.slice(k, k + 12)).filter((run) => b.includes(run));
      expect(shared).toEqual([]);
    }
  });
});

describe("keys per wallet", () => {
  test("past MAX_KEYS_PER_WALLET active keys: 409 KEY_LIMIT_REACHED, no key created; revoking one makes room", async () => {
    const small = await startGateway({ MAX_KEYS_PER_WALLET: "3" });
    try {
      const account = newAccount();
      const wallet = account.address.toLowerCase();
      const ids: number[] = [];
      for (let i = 0; i < 3; i++) {
        const res = await small.call("POST", "/v1/auth/keys", { ...(await small.signIn(account)), label: `k${i}` });
        expect(res.status).toBe(201);
        ids.push(res.body.id);
      }
      const refused = await small.call("POST", "/v1/auth/keys", { ...(await small.signIn(account)), label: "one more" });
      expect(refused.status).toBe(409);
      expect(refused.body).toEqual({
        error: "KEY_LIMIT_REACHED",
        message:
          "This wallet has 3 active API keys, the most it may have (3); revoke one (DELETE /v1/auth/keys/{key_id}) to create another",
      });
      const [r] = await small.services.sql<{ n: number }[]>`SELECT COUNT(*)::int AS n FROM api_keys WHERE wallet = ${wallet}`;
      expect(r!.n).toBe(3);
      // Another wallet is not affected; a revoked key no longer counts.
      expect((await small.call("POST", "/v1/auth/keys", await small.signIn(newAccount()))).status).toBe(201);
      expect((await small.call("DELETE", `/v1/auth/keys/${ids[0]}`, await small.signIn(account))).status).toBe(200);
      expect((await small.call("POST", "/v1/auth/keys", await small.signIn(account))).status).toBe(201);
    } finally {
      await small.close();
    }
  }, 60_000);
});
