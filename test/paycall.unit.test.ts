import { describe, expect, test } from "bun:test";
import { offerAmount } from "../src/modules/paycall/paycall.service.ts";
import { claimedMicro } from "../src/payments/payment.ts";
import { paymentNetwork } from "../src/payments/networks.ts";

describe("what a paid call tops up", () => {
  test("the shortfall rounded up to a cent, at least the minimum", () => {
    expect(offerAmount(0, 41_195, 1_000_000)).toBe(1_000_000);
    expect(offerAmount(0, 1_000_001, 1_000_000)).toBe(1_010_000);
    expect(offerAmount(500_000, 2_000_000, 1_000_000)).toBe(1_500_000);
    expect(offerAmount(-300, 2_345_678, 1_000_000)).toBe(2_350_000); // a negative balance counts as none
    expect(offerAmount(0, 41_195, 2_500_000)).toBe(2_500_000); // X402_CALL_MIN_USD raised
  });
});

describe("the amount a payment names", () => {
  const usdt = "0x00000000000000000000000000000000000000b2";
  const usdc = "0x00000000000000000000000000000000000000a1";
  const net = paymentNetwork("local", 84532, [
    { symbol: "USDT", address: usdt, decimals: 18, eip712Name: "Tether USD", eip712Version: "1", transfer: "permit" },
    { symbol: "USDC", address: usdc, decimals: 6, eip712Name: "USD Coin", eip712Version: "2", transfer: "eip3009" },
  ]);
  test("v2: accepted.amount in the accepted asset's units", () => {
    expect(claimedMicro({ x402Version: 2, accepted: { asset: usdc, amount: "1250000" } }, net)).toBe(1_250_000);
    expect(claimedMicro({ x402Version: 2, accepted: { asset: usdt, amount: "2000000000000000000" } }, net)).toBe(2_000_000);
    expect(claimedMicro({ x402Version: 2, accepted: { asset: usdt, amount: "1" } }, net)).toBeUndefined(); // not whole µUSDC
    expect(
      claimedMicro({ x402Version: 2, accepted: { asset: "0x0000000000000000000000000000000000000001", amount: "1" } }, net),
    ).toBeUndefined();
  });
  test("v1: the signed value, in the asset its transfer method fits", () => {
    expect(claimedMicro({ x402Version: 1, payload: { signature: "0x", authorization: { value: "3000000" } } }, net)).toBe(3_000_000);
    expect(claimedMicro({ x402Version: 1, payload: { signature: "0x", permit: { value: "1000000000000000000" } } }, net)).toBe(1_000_000);
    expect(claimedMicro({ x402Version: 1, payload: { signature: "0x" } }, net)).toBeUndefined();
  });
});
