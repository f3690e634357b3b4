import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { AdminFailure, AdminUsageError, parseAdmin } from "../src/admin/dispatch.ts";
import { hashRedeemCode } from "../src/modules/keys/keys.service.ts";
import { startGateway, type TestGateway } from "./helpers/gateway.ts";

let gw: TestGateway;

beforeAll(async () => {
  gw = await startGateway();
}, 60_000);

afterAll(async () => {
  await gw?.close();
});

const admin = (...args: string[]) => parseAdmin(args)(gw.services);
const codesOf = (out: string) => out.split("\n").filter((l) => !l.startsWith("#"));
const fresh = () => privateKeyToAccount(generatePrivateKey());

describe("admin redeem-codes create", () => {
  test("prints N codes once and stores only their hashes", async () => {
    const out = await admin("redeem-codes", "create", "--usd", "2.5", "--count", "3");
    const codes = codesOf(out);
    expect(out.split("\n")[0]).toMatch(/^# 3 redeem code\(s\) of 2\.500000 USD/);
    expect(codes).toHaveLength(3);
    for (const c of codes) expect(c).toMatch(/^rdm-[0-9a-f]{32}$/);
    const rows = await gw.services.sql<{ code_hash: string; amount_usdc: number }[]>`
      SELECT code_hash, amount_usdc FROM redeem_codes WHERE code_hash IN ${gw.services.sql(codes.map(hashRedeemCode))}`;
    expect(rows).toHaveLength(3);
    for (const r of rows) expect(r.amount_usdc).toBe(2_500_000);
    const plain = await gw.services.sql`SELECT 1 FROM redeem_codes WHERE code_hash IN ${gw.services.sql(codes)}`;
    expect(plain).toHaveLength(0);
  });

  test.each([
    [["redeem-codes", "create"]],
    [["redeem-codes", "create", "--usd", "0"]],
    [["redeem-codes", "create", "--usd", "1.0000001"]],
    [["redeem-codes", "create", "--usd", "5", "--count", "0"]],
    [["ref-codes", "create", "--owner", "0x12"]],
    [["ref-codes", "create", "--owner", "0x" + "1".repeat(40), "--code", "a b"]],
    [["nope"]],
  ])("usage mistakes are refused before anything runs: %p", (args) => {
    expect(() => parseAdmin(args)).toThrow(AdminUsageError);
  });
});

describe("redeem_code on POST /v1/auth/keys", () => {
  test("credits the wallet once; the response carries redeemed_credit_usdc in µUSDC", async () => {
    const [code] = codesOf(await admin("redeem-codes", "create", "--usd", "7.25"));
    const account = fresh();
    const wallet = account.address.toLowerCase();
    const res = await gw.call("POST", "/v1/auth/keys", { ...(await gw.signIn(account)), label: "promo", redeem_code: code });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ label: "promo", redeemed_credit_usdc: 7_250_000 });
    expect(res.body.key).toMatch(/^sk-[0-9a-f]{64}$/);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 7_250_000, locked: 0 });
    const [credit] = await gw.services
      .sql`SELECT kind, amount_usdc, applied_at IS NOT NULL AS applied FROM credits WHERE wallet = ${wallet}`;
    expect(credit).toMatchObject({ kind: "redeem", amount_usdc: 7_250_000, applied: true });
    const [used] = await gw.services.sql`SELECT redeemed_by FROM redeem_codes WHERE code_hash = ${hashRedeemCode(code!)}`;
    expect(used!.redeemed_by).toBe(wallet);
    // A key without a code carries no redeemed_credit_usdc.
    const plain = await gw.call("POST", "/v1/auth/keys", await gw.signIn(account));
    expect(plain.status).toBe(201);
    expect(plain.body.redeemed_credit_usdc).toBeUndefined();
  });

  test("codes are case- and whitespace-insensitive", async () => {
    const [code] = codesOf(await admin("redeem-codes", "create", "--usd", "1"));
    const res = await gw.call("POST", "/v1/auth/keys", { ...(await gw.signIn(fresh())), redeem_code: ` ${code!.toUpperCase()} ` });
    expect(res.status).toBe(201);
    expect(res.body.redeemed_credit_usdc).toBe(1_000_000);
  });
});

describe("referral codes", () => {
  test("ref_code attributes the wallet at its first key; admin referrals reports per referrer", async () => {
    const referrer = fresh().address;
    const out = await admin("ref-codes", "create", "--owner", referrer, "--code", "Friends-2025");
    expect(out).toBe(`ref code friends-2025 for ${referrer.toLowerCase()}`);
    const other = await admin("ref-codes", "create", "--owner", fresh().address);
    const otherCode = /^ref code (\S+) for/.exec(other)![1]!;

    const a = fresh();
    const b = fresh();
    for (const acct of [a, b]) {
      const res = await gw.call("POST", "/v1/auth/keys", { ...(await gw.signIn(acct)), ref_code: "FRIENDS-2025" });
      expect(res.status).toBe(201);
      expect(res.body.redeemed_credit_usdc).toBeUndefined();
    }
    // A later key with another (valid) code does not move the attribution.
    expect((await gw.call("POST", "/v1/auth/keys", { ...(await gw.signIn(a)), ref_code: otherCode })).status).toBe(201);
    const rows = await gw.services.sql<{ wallet: string; referrer: string }[]>`
      SELECT wallet, referrer FROM referrals WHERE referrer = ${referrer.toLowerCase()} ORDER BY wallet`;
    expect(rows.map((r) => r.wallet).sort()).toEqual([a.address.toLowerCase(), b.address.toLowerCase()].sort());
    await gw.grant(a.address.toLowerCase(), 1); // not a top-up: not in the top-up column
    await gw.services.credits.add({
      eventId: "topup:test:ref",
      wallet: b.address.toLowerCase(),
      kind: "topup",
      amountUsdc: 3_000_000,
      txHash: `0x${"cd".repeat(32)}`,
    });

    const report = (await admin("referrals")).split("\n");
    expect(report[0]).toBe("referrer\tcodes\twallets\ttopups_usd\tspent_usd");
    expect(report).toContain(`${referrer.toLowerCase()}\tfriends-2025\t2\t3.000000\t0.000000`);
  });

  test("a duplicate ref code is refused (a failure, exit 1, not a usage mistake)", async () => {
    const owner = fresh().address;
    await admin("ref-codes", "create", "--owner", owner, "--code", "dup-code");
    await expect(admin("ref-codes", "create", "--owner", owner, "--code", "dup-code")).rejects.toThrow(
      new AdminFailure(`ref code "dup-code" exists already`),
    );
  });
});
