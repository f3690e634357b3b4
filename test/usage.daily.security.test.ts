import { describe, expect, test } from "bun:test";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { sharedGateway } from "./helpers/gateway.ts";

const gw = sharedGateway();

describe("GET /v1/usage/{wallet}/daily needs credentials of that wallet", () => {
  test("no credentials, another wallet's key or SIWE, a revoked key, a bad signature: 401", async () => {
    const owner = await gw.newWallet(1);
    const other = await gw.newWallet(1);
    const path = `/v1/usage/${owner.wallet}/daily`;
    const unauthorized = { error: "UNAUTHORIZED", message: expect.any(String) };

    expect(await gw.call("GET", path)).toMatchObject({ status: 401, body: unauthorized });
    expect(await gw.call("GET", path, undefined, { authorization: `Bearer ${other.key}` })).toMatchObject({
      status: 401,
      body: unauthorized,
    });
    const otherSiwe = new URLSearchParams(await gw.signIn(other.account));
    expect(await gw.call("GET", `${path}?${otherSiwe}`)).toMatchObject({ status: 401, body: unauthorized });
    const stranger = privateKeyToAccount(generatePrivateKey());
    const forged = await gw.signIn(owner.account);
    forged.signature = await stranger.signMessage({ message: forged.message });
    expect(await gw.call("GET", `${path}?${new URLSearchParams(forged)}`)).toMatchObject({ status: 401, body: unauthorized });

    const revoke = await gw.call("DELETE", `/v1/auth/keys/${owner.keyId}`, await gw.signIn(owner.account));
    expect(revoke.status).toBe(200);
    expect(await gw.call("GET", path, undefined, { authorization: `Bearer ${owner.key}` })).toMatchObject({
      status: 401,
      body: unauthorized,
    });
    // Its own SIWE still reads it.
    expect((await gw.call("GET", `${path}?${new URLSearchParams(await gw.signIn(owner.account))}`)).status).toBe(200);
  });

  test("days outside 1..366 or not a whole number: 400 VALIDATION_ERROR", async () => {
    const { wallet, key } = await gw.newWallet(0);
    for (const days of ["0", "367", "1.5", "abc", "-3"]) {
      const res = await gw.call("GET", `/v1/usage/${wallet}/daily?days=${days}`, undefined, { authorization: `Bearer ${key}` });
      expect(res.status).toBe(400);
      expect(res.body.error).toBe("VALIDATION_ERROR");
    }
  });
});
