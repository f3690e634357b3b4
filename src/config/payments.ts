/**
 * The payment variables (x402 network, assets, pay-to address, facilitator, relayer, top-up minimum) and the rules
 * between them, apart from the rest of the settings: config.ts calls loadPayments once and keeps the result.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { ConfigError } from "../errors.ts";
import type { PaymentsConfig } from "../payments/config.ts";
import { type NetworkId, parseAssets, paymentNetwork } from "../payments/networks.ts";
import type { Deployment } from "./env.ts";
import type { Settings } from "./settings.ts";

const DEFAULT_NETWORK: Record<Deployment, NetworkId> = { production: "base", staging: "base-sepolia", local: "local" };

/** Validates the payment settings together (design §7); throws ConfigError naming the first bad one. */
export function loadPayments(s: Settings, chainId: number): PaymentsConfig {
  const { deployment } = s;
  const network = s.x402Network ?? DEFAULT_NETWORK[deployment];
  if (deployment === "production" && network !== "base")
    throw new ConfigError("X402_NETWORK", `production settles on a mainnet (base), got "${network}"`);
  if (deployment === "staging" && network === "base")
    throw new ConfigError("X402_NETWORK", "staging settles on a testnet, got the mainnet base");
  let assets;
  if (s.assetsFile) {
    try {
      assets = parseAssets(JSON.parse(readFileSync(resolve(s.assetsFile), "utf8")));
    } catch (e) {
      const why =
        e instanceof SyntaxError ? `invalid JSON (${e.message})` : e instanceof Error && !("code" in e) ? e.message : "cannot be read";
      throw new ConfigError("ASSETS_FILE", `${s.assetsFile}: ${why}`);
    }
  }
  const chain = paymentNetwork(network, chainId, assets);
  if (network !== "local" && s.chainId !== undefined && s.chainId !== chain.chainId) {
    throw new ConfigError("CHAIN_ID", `${network} is chain ${chain.chainId}, got ${s.chainId}`);
  }
  const { payTo, relayerPrivateKey, facilitatorUrl, rpcUrl } = s;
  const facilitator = s.facilitator ?? (facilitatorUrl ? "http" : undefined);
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
    relayerPrivateKey,
    assetsFile: s.assetsFile,
    chain,
    facilitatorTimeoutMs: s.facilitatorTimeoutMs,
    callMinMicro: s.callMinMicro,
    enabled: Boolean(payTo && facilitator && chain.assets.length > 0),
  };
}
