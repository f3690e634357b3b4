/**
 * The gateway's own EIP-55 address checks (src/payments/address.ts, so a gateway that takes no payment never loads
 * viem) agree with viem's on every casing, and the Permit2 proxy it names is `@x402/evm`'s.
 */
import { describe, expect, test } from "bun:test";
import { x402ExactPermit2ProxyAddress, x402UptoPermit2ProxyAddress } from "@x402/evm";
import * as viem from "viem";
import { getAddress, isAddress, isAddressEqual } from "../src/payments/address.ts";
import { X402_PERMIT2_PROXY } from "../src/payments/payment.ts";
import { X402_UPTO_PERMIT2_PROXY } from "../src/payments/requirements.ts";

/** A random address in lower case, its checksummed form, one with a wrong checksum, and upper case. */
function casings(): string[] {
  const lower = `0x${Buffer.from(crypto.getRandomValues(new Uint8Array(20))).toString("hex")}`;
  const checksummed = viem.getAddress(lower);
  const i = checksummed.search(/[a-fA-F]/);
  const flipped = i < 0 ? checksummed : checksummed.slice(0, i) + swapCase(checksummed[i]!) + checksummed.slice(i + 1);
  return [lower, checksummed, flipped, `0x${lower.slice(2).toUpperCase()}`];
}
const swapCase = (c: string) => (c === c.toLowerCase() ? c.toUpperCase() : c.toLowerCase());

describe("EVM addresses", () => {
  test("isAddress and getAddress answer as viem's do, strict and not, for 500 random addresses in four casings", () => {
    for (let n = 0; n < 500; n++) {
      for (const a of casings()) {
        expect(isAddress(a)).toBe(viem.isAddress(a));
        expect(isAddress(a, { strict: false })).toBe(viem.isAddress(a, { strict: false }));
        expect(getAddress(a)).toBe(viem.getAddress(a));
      }
    }
  });

  test("a wrong checksum is refused in strict mode only; what is not an address is refused and throws", () => {
    const good = "0x787bc77F1700DCE0f8c1581c18A12d3153D1B150";
    const bad = "0x787bc77F1700DCE0f8c1581c18A12d3153D1b150";
    expect([isAddress(good), isAddress(bad), isAddress(bad, { strict: false })]).toEqual([true, false, true]);
    for (const x of ["", "0x", "0x123", `${good}00`, good.slice(2), "0xZZ7bc77F1700DCE0f8c1581c18A12d3153D1B150"]) {
      expect(isAddress(x, { strict: false })).toBe(false);
      expect(() => getAddress(x)).toThrow("is invalid");
      expect(() => isAddressEqual(x, good)).toThrow("is invalid");
    }
    expect(isAddressEqual(good.toLowerCase(), bad)).toBe(true);
    expect(isAddressEqual(good, "0x000000000000000000000000000000000000dEaD")).toBe(false);
  });

  test("the Permit2 proxy a payment must name is x402's", () => {
    expect(X402_PERMIT2_PROXY).toBe(x402ExactPermit2ProxyAddress);
    expect(X402_UPTO_PERMIT2_PROXY).toBe(x402UptoPermit2ProxyAddress);
  });
});
