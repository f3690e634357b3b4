import { describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, loadConfig } from "../src/config.ts";

const dir = mkdtempSync(join(tmpdir(), "gw-paycfg-"));
const models = join(dir, "models.json");
writeFileSync(models, JSON.stringify({ providers: {}, models: [] }));
const file = (name: string, content: unknown) => {
  const f = join(dir, name);
  writeFileSync(f, typeof content === "string" ? content : JSON.stringify(content));
  return f;
};
const PAY_TO = "0x000000000000000000000000000000000000dEaD";
const KEY = `0x${"11".repeat(32)}`;
const usdt = {
  symbol: "USDT",
  address: "0x00000000000000000000000000000000000000a1",
  decimals: 6,
  eip712Name: "Tether USD",
  eip712Version: "1",
  transfer: "permit",
};
const load = (env: Record<string, string>) => loadConfig({ MODELS_FILE: models, LOG_LEVEL: "error", ...env });

function problem(env: Record<string, string>): string {
  try {
    load(env);
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return (e as ConfigError).message;
  }
  throw new Error("configuration was accepted");
}

describe("payment configuration (design §7)", () => {
  test("production settles on Base mainnet USDC, staging on Base Sepolia USDC (real addresses, EIP-712 domains)", () => {
    const prod = load({ DEPLOYMENT: "production", PAY_TO, FACILITATOR_URL: "https://facilitator.example/" }).payments;
    expect(prod).toMatchObject({ network: "base", facilitator: "http", enabled: true, payTo: PAY_TO.toLowerCase() });
    expect(prod.chain).toMatchObject({ name: "Base", chainId: 8453, caip2: "eip155:8453", v1Name: "base", testnet: false });
    expect(prod.chain.assets).toEqual([
      {
        symbol: "USDC",
        address: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        decimals: 6,
        eip712Name: "USD Coin",
        eip712Version: "2",
        transfer: "eip3009",
      },
    ]);
    const staging = load({
      DEPLOYMENT: "staging",
      PAY_TO,
      FACILITATOR: "local",
      RPC_URL: "http://127.0.0.1:8545",
      RELAYER_PRIVATE_KEY: KEY,
    }).payments;
    expect(staging.chain).toMatchObject({ name: "Base Sepolia", chainId: 84532, caip2: "eip155:84532", v1Name: "base-sepolia" });
    expect(staging.chain.assets[0]).toMatchObject({
      address: "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
      eip712Name: "USDC",
      eip712Version: "2",
    });
  });

  test("local: the chain id is CHAIN_ID's, assets come from ASSETS_FILE; without them top-ups are off", () => {
    expect(load({}).payments).toMatchObject({ network: "local", enabled: false });
    const c = load({
      CHAIN_ID: "84532",
      PAY_TO,
      FACILITATOR: "local",
      RPC_URL: "http://127.0.0.1:8545",
      RELAYER_PRIVATE_KEY: KEY,
      ASSETS_FILE: file("assets.json", [usdt]),
    }).payments;
    expect(c.enabled).toBe(true);
    expect(c.chain).toMatchObject({ id: "local", chainId: 84532, v1Name: "base-sepolia" });
    expect(c.chain.assets[0]).toMatchObject({ symbol: "USDT", transfer: "permit", address: "0x00000000000000000000000000000000000000A1" });
  });

  test.each([
    [{ DEPLOYMENT: "production", FACILITATOR_URL: "https://f.example" }, /^PAY_TO: is required/],
    [{ DEPLOYMENT: "production", PAY_TO }, /^FACILITATOR_URL: /],
    [
      { DEPLOYMENT: "production", PAY_TO, FACILITATOR_URL: "https://f.example", X402_NETWORK: "base-sepolia" },
      /^X402_NETWORK: production settles on a mainnet/,
    ],
    [{ DEPLOYMENT: "staging", PAY_TO, FACILITATOR_URL: "https://f.example", X402_NETWORK: "base" }, /^X402_NETWORK: staging/],
    [{ X402_NETWORK: "ethereum" }, /^X402_NETWORK: must be one of/],
    [{ PAY_TO: "0x1234" }, /^PAY_TO: /],
    [{ FACILITATOR: "remote" }, /^FACILITATOR: /],
    [{ FACILITATOR: "local", RELAYER_PRIVATE_KEY: KEY }, /^RPC_URL: is required/],
    [{ FACILITATOR: "local", RPC_URL: "http://127.0.0.1:8545" }, /^RELAYER_PRIVATE_KEY: is required/],
    [{ FACILITATOR: "http" }, /^FACILITATOR_URL: is required/],
    [{ RELAYER_PRIVATE_KEY: "0xabc" }, /^RELAYER_PRIVATE_KEY: /],
    [{ FACILITATOR_URL: "ftp://x" }, /^FACILITATOR_URL: /],
    [{ DEPLOYMENT: "staging", CHAIN_ID: "1", PAY_TO, FACILITATOR_URL: "https://f.example" }, /^CHAIN_ID: base-sepolia is chain 84532/],
    [{ FACILITATOR_TIMEOUT_MS: "5" }, /^FACILITATOR_TIMEOUT_MS: /],
    [{ X402_CALL_MIN_USD: "0.5" }, /^X402_CALL_MIN_USD: must be a USD amount from 1/],
    [{ X402_CALL_MIN_USD: "2.1234567" }, /^X402_CALL_MIN_USD: /],
    [{ X402_CALL_MIN_USD: "five" }, /^X402_CALL_MIN_USD: /],
  ])("refused: %o", (env, expected) => {
    expect(problem(env as Record<string, string>)).toMatch(expected);
  });

  test.each([
    ["not JSON", "{", /invalid JSON/],
    ["an empty list", [], /non-empty JSON list/],
    ["a bad address", [{ ...usdt, address: "0x12" }], /entry 0: address/],
    ["bad decimals", [{ ...usdt, decimals: 6.5 }], /entry 0: decimals/],
    ["an unknown transfer", [{ ...usdt, transfer: "permit2" }], /entry 0: transfer/],
    ["a missing EIP-712 name", [{ ...usdt, eip712Name: "" }], /entry 0: eip712Name/],
    ["an address twice", [usdt, { ...usdt, symbol: "X" }], /entry 1: address listed twice/],
  ])("ASSETS_FILE with %s is refused", (_name, content, expected) => {
    expect(problem({ ASSETS_FILE: file(`${Math.random()}.json`, content) })).toMatch(expected as RegExp);
  });

  test("X402_CALL_MIN_USD: the least a paid call tops up, 1 USD unless raised", () => {
    expect(loadConfig({}).payments.callMinMicro).toBe(1_000_000);
    expect(loadConfig({ X402_CALL_MIN_USD: "2.5" }).payments.callMinMicro).toBe(2_500_000);
  });

  test("permit assets need the relayer (it is the permit's spender)", () => {
    expect(problem({ ASSETS_FILE: file("permit.json", [usdt]), PAY_TO, FACILITATOR_URL: "https://f.example" })).toMatch(
      /^ASSETS_FILE: permit assets need/,
    );
  });
});
