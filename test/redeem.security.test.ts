import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from "viem/accounts";
import { parseAdmin } from "../src/admin/dispatch.ts";
import { hashRedeemCode } from "../src/modules/keys/keys.service.ts";
import { startGateway, type TestGateway } from "./helpers/gateway.ts";

let gw: TestGateway;

beforeAll(async () => {
  gw = await startGateway();
}, 60_000);

afterAll(async () => {
  await gw?.close();
});

const fresh = () => privateKeyToAccount(generatePrivateKey());
async function newCode(usd = "5"): Promise<string> {
  const out = await parseAdmin(["redeem-codes", "create", "--usd", usd])(gw.services);
  return out.split("\n")[1]!;
}
const createKey = async (account: PrivateKeyAccount, extra: Record<string, unknown>) =>
  gw.call("POST", "/v1/auth/keys", { ...(await gw.signIn(account)), ...extra });

/** Everything a refused request must leave as it was. */
async function state(account: PrivateKeyAccount) {
  const wallet = account.address.toLowerCase();
  const [keys] = await gw.services.sql`SELECT count(*)::int AS n FROM api_keys WHERE wallet = ${wallet}`;
  const [credits] = await gw.services.sql`SELECT count(*)::int AS n FROM credits WHERE wallet = ${wallet}`;
  const [refs] = await gw.services.sql`SELECT count(*)::int AS n FROM referrals WHERE wallet = ${wallet}`;
  return { keys: keys!.n, credits: credits!.n, referrals: refs!.n, ledger: await gw.ledgerState(wallet) };
}

describe("a redeem code credits exactly once across all wallets", () => {
  test("a second use by the same wallet: 400, no key, no credit", async () => {
    const code = await newCode();
    const a = fresh();
    expect((await createKey(a, { redeem_code: code })).status).toBe(201);
    const before = await state(a);
    const again = await createKey(a, { redeem_code: code });
    expect(again.status).toBe(400);
    expect(again.body).toEqual({ error: "VALIDATION_ERROR", message: "Unknown or already used redeem_code" });
    expect(await state(a)).toEqual(before);
    expect(before.ledger).toEqual({ balance: 5_000_000, locked: 0 });
  });

  test("use by a second wallet: 400 and that wallet gets nothing, not even a key", async () => {
    const code = await newCode();
    expect((await createKey(fresh(), { redeem_code: code })).status).toBe(201);
    const b = fresh();
    const res = await createKey(b, { redeem_code: code });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe("VALIDATION_ERROR");
    expect(await state(b)).toEqual({ keys: 0, credits: 0, referrals: 0, ledger: { balance: 0, locked: 0 } });
  });

  test("ten wallets race for one code: exactly one 201 and one credit", async () => {
    const code = await newCode("3");
    const accounts = Array.from({ length: 10 }, fresh);
    const signed = await Promise.all(accounts.map((a) => gw.signIn(a)));
    const results = await Promise.all(accounts.map((_, i) => gw.call("POST", "/v1/auth/keys", { ...signed[i], redeem_code: code })));
    expect(results.map((r) => r.status).sort()).toEqual([201, 400, 400, 400, 400, 400, 400, 400, 400, 400]);
    const winner = accounts[results.findIndex((r) => r.status === 201)]!;
    const [spent] = await gw.services.sql`SELECT redeemed_by FROM redeem_codes WHERE code_hash = ${hashRedeemCode(code)}`;
    expect(spent!.redeemed_by).toBe(winner.address.toLowerCase());
    const [credits] = await gw.services
      .sql`SELECT count(*)::int AS n, sum(amount_usdc)::bigint AS total FROM credits WHERE event_id = ${`redeem:${hashRedeemCode(code)}`}`;
    expect(credits).toMatchObject({ n: 1, total: 3_000_000 });
    for (const a of accounts) expect((await gw.ledgerState(a.address.toLowerCase())).balance).toBe(a === winner ? 3_000_000 : 0);
  });

  test("ref_code and redeem_code together are refused and change nothing; the code stays usable", async () => {
    const code = await newCode("2");
    await parseAdmin(["ref-codes", "create", "--owner", fresh().address, "--code", "both-at-once"])(gw.services);
    const a = fresh();
    const res = await createKey(a, { redeem_code: code, ref_code: "both-at-once" });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "VALIDATION_ERROR", message: "ref_code and redeem_code are mutually exclusive" });
    expect(await state(a)).toEqual({ keys: 0, credits: 0, referrals: 0, ledger: { balance: 0, locked: 0 } });
    const [unspent] = await gw.services.sql`SELECT redeemed_at FROM redeem_codes WHERE code_hash = ${hashRedeemCode(code)}`;
    expect(unspent!.redeemed_at).toBeNull();
    expect((await createKey(a, { redeem_code: code })).body.redeemed_credit_usdc).toBe(2_000_000);
  });

  test("an unknown code and a bad SIWE signature spend nothing", async () => {
    const a = fresh();
    const unknown = await createKey(a, { redeem_code: "rdm-" + "0".repeat(32) });
    expect(unknown.status).toBe(400);
    const code = await newCode();
    const { message } = await gw.signIn(a);
    const forged = await gw.call("POST", "/v1/auth/keys", {
      message,
      signature: await fresh().signMessage({ message }),
      redeem_code: code,
    });
    expect(forged.status).toBe(401);
    const [unspent] = await gw.services.sql`SELECT redeemed_at FROM redeem_codes WHERE code_hash = ${hashRedeemCode(code)}`;
    expect(unspent!.redeemed_at).toBeNull();
    expect(await state(a)).toEqual({ keys: 0, credits: 0, referrals: 0, ledger: { balance: 0, locked: 0 } });
  });
});

describe("referral codes", () => {
  test("an unknown ref_code is 400 and creates no key", async () => {
    const a = fresh();
    const res = await createKey(a, { ref_code: "no-such-code" });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "VALIDATION_ERROR", message: "Unknown ref_code" });
    expect(await state(a)).toEqual({ keys: 0, credits: 0, referrals: 0, ledger: { balance: 0, locked: 0 } });
  });

  test("a wallet cannot refer itself", async () => {
    const a = fresh();
    await parseAdmin(["ref-codes", "create", "--owner", a.address, "--code", "self-ref"])(gw.services);
    const res = await createKey(a, { ref_code: "self-ref" });
    expect(res.status).toBe(400);
    expect(await state(a)).toEqual({ keys: 0, credits: 0, referrals: 0, ledger: { balance: 0, locked: 0 } });
  });

  test("a wallet that already has a key is not attributed later", async () => {
    const owner = fresh();
    await parseAdmin(["ref-codes", "create", "--owner", owner.address, "--code", "late-ref"])(gw.services);
    const a = fresh();
    expect((await createKey(a, {})).status).toBe(201);
    expect((await createKey(a, { ref_code: "late-ref" })).status).toBe(201);
    expect((await state(a)).referrals).toBe(0);
  });
});
