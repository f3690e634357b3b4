import type { Address } from "viem";
import { getAddress, isAddress } from "./address.ts";

/**
 * How the payer's signature moves the token:
 * - `eip3009`: `transferWithAuthorization` (USDC); x402 `exact` as every x402 client and facilitator knows it.
 * - `permit`: an EIP-2612 `permit` naming the gateway's relayer as spender, then `transferFrom` to PAY_TO,
 *   both sent by the in-process facilitator (USDT-style tokens without EIP-3009). See docs/payments.md "Top-ups (x402)".
 */
export type TransferMethod = "eip3009" | "permit";

/** One accepted token. `decimals` comes from here, never assumed to be 6. */
export interface Asset {
  symbol: string;
  address: Address;
  decimals: number;
  /** EIP-712 domain name and version of the token (what `extra.name` / `extra.version` announce). */
  eip712Name: string;
  eip712Version: string;
  transfer: TransferMethod;
}

export type NetworkId = "base" | "base-sepolia" | "local";

/** The settlement network of a deployment. */
export interface PaymentNetwork {
  id: NetworkId;
  /** Human-readable name (TopupsResponse.network). */
  name: string;
  chainId: number;
  /** CAIP-2 identifier: the x402 v2 `network`. */
  caip2: string;
  /** x402 v1 network name, when x402 v1 knows this chain id (v1 clients accept only their fixed list). */
  v1Name?: string;
  testnet: boolean;
  assets: Asset[];
}

/** x402 v1 names of the chain ids this gateway can settle on (from the x402 v1 network list). */
const V1_NAMES: Record<number, string> = { 8453: "base", 84532: "base-sepolia" };

/**
 * Built-in asset tables. Base and Base Sepolia have no Tether-issued USDT, so only USDC is built in there; an
 * ASSETS_FILE can add tokens (the local dev chain gets its USDC and USDT stand-ins that way).
 */
const BUILT_IN: Record<Exclude<NetworkId, "local">, Omit<PaymentNetwork, "caip2" | "v1Name">> = {
  base: {
    id: "base",
    name: "Base",
    chainId: 8453,
    testnet: false,
    assets: [
      {
        symbol: "USDC",
        address: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        decimals: 6,
        eip712Name: "USD Coin",
        eip712Version: "2",
        transfer: "eip3009",
      },
    ],
  },
  "base-sepolia": {
    id: "base-sepolia",
    name: "Base Sepolia",
    chainId: 84532,
    testnet: true,
    assets: [
      {
        symbol: "USDC",
        address: "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
        decimals: 6,
        eip712Name: "USDC",
        eip712Version: "2",
        transfer: "eip3009",
      },
    ],
  },
};

export const NETWORK_IDS = ["base", "base-sepolia", "local"] as const;

/** The network of an id; a local chain takes its chain id from CHAIN_ID. `assets` replaces the built-in table. */
export function paymentNetwork(id: NetworkId, localChainId: number, assets?: Asset[]): PaymentNetwork {
  const base =
    id === "local"
      ? { id, name: `Local dev chain (chain id ${localChainId})`, chainId: localChainId, testnet: true, assets: [] as Asset[] }
      : BUILT_IN[id];
  return {
    ...base,
    assets: assets ?? base.assets,
    caip2: `eip155:${base.chainId}`,
    v1Name: V1_NAMES[base.chainId],
  };
}

/** Parses an ASSETS_FILE list; throws Error(problem) naming the entry. */
export function parseAssets(json: unknown): Asset[] {
  if (!Array.isArray(json) || json.length === 0) throw new Error("must be a non-empty JSON list of assets");
  const seen = new Set<string>();
  return json.map((a: Record<string, unknown>, i) => {
    const where = `entry ${i}`;
    if (typeof a !== "object" || a === null) throw new Error(`${where} is not an object`);
    const str = (k: string) => {
      const v = a[k];
      if (typeof v !== "string" || v.trim() === "" || v.length > 64) throw new Error(`${where}: ${k} must be a non-empty string`);
      return v;
    };
    const address = str("address");
    if (!isAddress(address, { strict: false })) throw new Error(`${where}: address is not an EVM address`);
    if (seen.has(address.toLowerCase())) throw new Error(`${where}: address listed twice`);
    seen.add(address.toLowerCase());
    const decimals = a.decimals;
    if (typeof decimals !== "number" || !Number.isInteger(decimals) || decimals < 0 || decimals > 36) {
      throw new Error(`${where}: decimals must be a whole number 0..36`);
    }
    const transfer = a.transfer;
    if (transfer !== "eip3009" && transfer !== "permit") throw new Error(`${where}: transfer must be "eip3009" or "permit"`);
    return {
      symbol: str("symbol"),
      address: getAddress(address),
      decimals,
      eip712Name: str("eip712Name"),
      eip712Version: str("eip712Version"),
      transfer,
    };
  });
}

/**
 * µUSDC → the asset's smallest unit. Null when the amount cannot be expressed exactly (fewer than 6 decimals
 * and a remainder): such an asset is not offered for that amount.
 */
export function toAtomic(microUsdc: number, decimals: number): bigint | null {
  const micro = BigInt(microUsdc);
  if (decimals >= 6) return micro * 10n ** BigInt(decimals - 6);
  const div = 10n ** BigInt(6 - decimals);
  return micro % div === 0n ? micro / div : null;
}

/** An amount in an asset's smallest unit → µUSDC, or null when it is not a whole number of µUSDC. */
export function fromAtomic(atomic: bigint, decimals: number): number | null {
  if (decimals <= 6) return Number(atomic * 10n ** BigInt(6 - decimals));
  const div = 10n ** BigInt(decimals - 6);
  return atomic % div === 0n ? Number(atomic / div) : null;
}
