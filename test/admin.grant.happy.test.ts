/** `admin grant`: money in without a payment, recorded in Postgres, applied once, safe to run again with --id. */
import { describe, expect, test } from "bun:test";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { AdminUsageError, parseAdmin } from "../src/admin/dispatch.ts";
import { sharedGateway } from "./helpers/gateway.ts";

const gw = sharedGateway();

const admin = (...args: string[]) => parseAdmin(args)(gw.services);
const freshWallet = () => privateKeyToAccount(generatePrivateKey()).address.toLowerCase();

async function grants(wallet: string) {
  return [
    ...(await gw.services.sql<{ amount_usdc: number; reason: string }[]>`
    SELECT amount_usdc, reason FROM credits WHERE wallet = ${wallet} AND kind = 'grant' ORDER BY id`),
  ];
}

describe("admin grant", () => {
  test("credits the wallet and records the grant with its reason", async () => {
    const wallet = freshWallet();
    const out = await admin("grant", wallet, "2.5", "--reason", "support ticket 42");
    expect(out).toMatch(/^granted 2\.500000 USD to 0x[0-9a-f]{40} \(credit #\d+\); balance 2\.500000 USD$/);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 2_500_000, locked: 0 });
    expect(await grants(wallet)).toEqual([{ amount_usdc: 2_500_000, reason: "support ticket 42" }]);
  });

  test("run again with the same --id (an operator retrying): granted once", async () => {
    const wallet = freshWallet();
    await admin("grant", wallet, "1", "--reason", "promo", "--id", "promo-2026-11:alice");
    const again = await admin("grant", wallet, "1", "--reason", "promo", "--id", "promo-2026-11:alice");
    expect(again).toMatch(/^already granted: grant:promo-2026-11:alice is credit #\d+; not granted again/);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
    expect(await grants(wallet)).toHaveLength(1);

    // The same id for a different grant is an operator mistake: refused, nothing granted anywhere.
    const other = freshWallet();
    await expect(admin("grant", other, "1", "--reason", "promo", "--id", "promo-2026-11:alice")).rejects.toThrow(
      /was used for another grant/,
    );
    await expect(admin("grant", wallet, "2", "--reason", "promo", "--id", "promo-2026-11:alice")).rejects.toThrow(
      /was used for another grant/,
    );
    expect(await gw.ledgerState(other)).toEqual({ balance: 0, locked: 0 });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
  });

  test.each([
    [["grant", "0x12", "1", "--reason", "x"]],
    [["grant", "0x" + "a".repeat(40), "0", "--reason", "x"]],
    [["grant", "0x" + "a".repeat(40), "1.0000001", "--reason", "x"]],
    [["grant", "0x" + "a".repeat(40), "1"]],
    [["grant", "0x" + "a".repeat(40), "1", "--reason", "x", "--id", "has space"]],
  ])("usage mistakes are refused before anything runs: %p", (args) => {
    expect(() => parseAdmin(args)).toThrow(AdminUsageError);
  });
});
