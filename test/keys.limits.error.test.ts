/**
 * A key's limits refused or enforced where it is hardest (issue 35): bad `models` / `requests_per_minute` values
 * are 400 VALIDATION_ERROR and create nothing (the signed message is not spent either); a key's own rate holds on
 * a gateway admitting requests under credit leases (CREDIT_LEASES=on), whose in-memory admission never sees it.
 */
import { describe, expect, test } from "bun:test";
import { RateLimitError } from "openai";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { usageFor } from "./helpers/openaiStandin.ts";

const gw = sharedGateway({ CREDIT_LEASES: "on" });

const messages = [{ role: "user" as const, content: "hi" }];
const usage = usageFor(messages.length);
const charge = expectedCharge(usage.prompt_tokens, usage.completion_tokens);

async function keyCount(wallet: string): Promise<number> {
  const [r] = await gw.services.sql<{ n: number }[]>`SELECT COUNT(*)::int AS n FROM api_keys WHERE wallet = ${wallet}`;
  return r!.n;
}

describe("bad limits on key creation", () => {
  const bad: [string, Record<string, unknown>, string][] = [
    ["requests_per_minute 0", { requests_per_minute: 0 }, "requests_per_minute"],
    ["requests_per_minute -1", { requests_per_minute: -1 }, "requests_per_minute"],
    ["requests_per_minute 1.5", { requests_per_minute: 1.5 }, "requests_per_minute"],
    ['requests_per_minute "x"', { requests_per_minute: "x" }, "requests_per_minute"],
    ["a models entry that is not a string", { models: ["standin/echo", 7] }, "models"],
    ["models not a list", { models: "standin/echo" }, "models"],
    ["an empty models list", { models: [] }, "models"],
    ["a model the catalog does not have", { models: ["standin/nope"] }, 'models: "standin/nope" is neither'],
    ["a provider the catalog does not have", { models: ["nobody/*"] }, 'models: "nobody/*" is neither'],
  ];
  for (const [what, fields, named] of bad) {
    test(`${what}: 400 VALIDATION_ERROR naming it, nothing created, the message still usable`, async () => {
      const account = privateKeyToAccount(generatePrivateKey());
      const signed = await gw.signIn(account);
      const res = await gw.call("POST", "/v1/auth/keys", { ...signed, ...fields });
      expect(res.status).toBe(400);
      expect(res.body.error).toBe("VALIDATION_ERROR");
      expect(res.body.message).toContain(named);
      expect(await keyCount(account.address.toLowerCase())).toBe(0);
      // Refused before the sign-in: the same signed message creates a key once the body is right.
      expect((await gw.call("POST", "/v1/auth/keys", { ...signed, models: ["standin/*"], requests_per_minute: 1 })).status).toBe(201);
    });
  }
});

describe("a key's requests per minute under credit leases", () => {
  test("every request of such a key is counted in Redis: the lease admits none past the key's minute", async () => {
    // The key's window slides by the minute (see keys.limits.happy): start with at least 10 s of the minute left.
    const left = 60_000 - (Date.now() % 60_000);
    if (left < 10_000) await Bun.sleep(left + 10);
    const { wallet, key } = await gw.newWallet(5, { requests_per_minute: 3 });
    const client = gw.openai(key);
    for (let i = 0; i < 3; i++) await client.chat.completions.create({ model: "standin/echo", messages });
    const refused = await Promise.allSettled([1, 2, 3].map(() => client.chat.completions.create({ model: "standin/echo", messages })));
    for (const r of refused) {
      expect(r.status).toBe("rejected");
      expect((r as PromiseRejectedResult).reason).toBeInstanceOf(RateLimitError);
    }
    await gw.services.chat.idle();
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 5_000_000 - 3 * charge, locked: 0 });
    // A key without its own rate on the same gateway is admitted under a lease as before.
    const plain = await gw.newWallet(5);
    for (let i = 0; i < 5; i++) await gw.openai(plain.key).chat.completions.create({ model: "standin/echo", messages });
    await gw.services.chat.idle();
    await gw.services.leases!.quiet();
    expect((await gw.ledgerState(plain.wallet)).balance).toBe(5_000_000 - 5 * charge);
  });
});
