/**
 * The payment variables (x402 network, assets, pay-to address, facilitator, relayer, top-up minimum) and the rules
 * between them, apart from the rest of the settings: config.ts calls loadPayments once and keeps the result.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { parseUsd } from "../billing/money.ts";
import { ConfigError } from "../errors.ts";
import type { PaymentsConfig } from "../payments/config.ts";
import { NETWORK_IDS, type NetworkId, parseAssets, paymentNetwork } from "../payments/networks.ts";
import { type Deployment, type Env, int, oneOf, url } from "./env.ts";

const DEFAULT_NETWORK: Record<Deployment, NetworkId> = { production: "base", staging: "base-sepolia", local: "local" };

/** Validates the payment variables (docs/operating.md "Configuration"); throws ConfigError naming the first bad one. */
export function loadPayments(env: Env, deployment: Deployment, chainId: number): PaymentsConfig {
  const network = oneOf(env, "X402_NETWORK", NETWORK_IDS, DEFAULT_NETWORK[deployment]);
  if (deployment === "production" && network !== "base")
    throw new ConfigError("X402_NETWORK", `production settles on a mainnet (base), got "${network}"`);
  if (deployment === "staging" && network === "base")
    throw new ConfigError("X402_NETWORK", "staging settles on a testnet, got the mainnet base");
  let assets;
  if (env.ASSETS_FILE) {
    try {
      assets = parseAssets(JSON.parse(readFileSync(resolve(env.ASSETS_FILE), "utf8")));
    } catch (e) {
      const why =
        e instanceof SyntaxError ? `invalid JSON (${e.message})` : e instanceof Error && !("code" in e) ? e.message : "cannot be read";
      throw new ConfigError("ASSETS_FILE", `${env.ASSETS_FILE}: ${why}`);
    }
  }
  const chain = paymentNetwork(network, chainId, assets);
  if (network !== "local" && env.CHAIN_ID && Number(env.CHAIN_ID) !== chain.chainId) {
    throw new ConfigError("CHAIN_ID", `${network} is chain ${chain.chainId}, got ${env.CHAIN_ID}`);
  }
  const address = (name: string): `0x${string}` | undefined => {
    const raw = env[name];
    if (!raw) return undefined;
    if (!/^0x[0-9a-fA-F]{40}$/.test(raw)) throw new ConfigError(name, "must be a 0x-prefixed 20-byte address");
    return raw.toLowerCase() as `0x${string}`;
  };
  const payTo = address("PAY_TO");
  const relayerPrivateKey = env.RELAYER_PRIVATE_KEY || undefined;
  if (relayerPrivateKey && !/^0x[0-9a-fA-F]{64}$/.test(relayerPrivateKey))
    throw new ConfigError("RELAYER_PRIVATE_KEY", "must be 0x followed by 64 hex digits");
  const facilitatorUrl = url(env, "FACILITATOR_URL", ["http:", "https:"]);
  const rpcUrl = url(env, "RPC_URL", ["http:", "https:"]);
  const facilitator = env.FACILITATOR ? oneOf(env, "FACILITATOR", ["local", "http"] as const, "http") : facilitatorUrl ? "http" : undefined;
  if (facilitator === "local" && !rpcUrl) throw new ConfigError("RPC_URL", "is required with FACILITATOR=local");
  if (facilitator === "local" && !relayerPrivateKey) throw new ConfigError("RELAYER_PRIVATE_KEY", "is required with FACILITATOR=local");
  if (facilitator === "http" && !facilitatorUrl) throw new ConfigError("FACILITATOR_URL", "is required with FACILITATOR=http");
  // Permit assets settle through the relayer (it is the permit's spender), whatever settles EIP-3009.
  if (chain.assets.some((a) => a.transfer === "permit") && !(rpcUrl && relayerPrivateKey)) {
    throw new ConfigError("ASSETS_FILE", "permit assets need RELAYER_PRIVATE_KEY and RPC_URL (the relayer settles them)");
  }
  if (deployment !== "local" && !payTo) throw new ConfigError("PAY_TO", `is required for DEPLOYMENT=${deployment}`);
  if (deployment !== "local" && !facilitator)
    throw new ConfigError("FACILITATOR_URL", `or FACILITATOR=local is required for DEPLOYMENT=${deployment}`);
  return {
    network,
    payTo,
    facilitatorUrl,
    facilitator,
    rpcUrl,
    relayerPrivateKey: relayerPrivateKey as `0x${string}` | undefined,
    assetsFile: env.ASSETS_FILE,
    chain,
    facilitatorTimeoutMs: int(env, "FACILITATOR_TIMEOUT_MS", 30_000, 100, 600_000),
    callMinMicro: callMinimum(env),
    enabled: Boolean(payTo && facilitator && chain.assets.length > 0),
  };
}

/** X402_CALL_MIN_USD: the least a paid model call tops up (the offer on its 402); at least the 1 USD minimum top-up. */
function callMinimum(env: Env): number {
  const raw = env.X402_CALL_MIN_USD;
  if (raw === undefined || raw === "") return 1_000_000;
  const micro = parseUsd(raw);
  if (micro === null || micro < 1_000_000 || micro > 1_000_000_000_000)
    throw new ConfigError("X402_CALL_MIN_USD", `must be a USD amount from 1 to 1000000 with at most 6 decimals, got "${raw}"`);
  return micro;
}
