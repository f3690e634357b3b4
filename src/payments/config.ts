import type { NetworkId, PaymentNetwork } from "./networks.ts";

/** Top-up settings (docs/payments.md "Top-ups (x402)", docs/operating.md "Configuration"), validated from the environment by config/payments.ts. */
export interface PaymentsConfig {
  network: NetworkId;
  /** Recipient of every top-up; lower-case hex. */
  payTo?: `0x${string}`;
  facilitatorUrl?: string;
  /** "local": in-process facilitator (relayer key on RPC_URL); "http": FACILITATOR_URL. */
  facilitator?: "local" | "http";
  rpcUrl?: string;
  relayerPrivateKey?: `0x${string}`;
  assetsFile?: string;
  /** The settlement network with its accepted assets (built-in table or ASSETS_FILE). */
  chain: PaymentNetwork;
  /** Bound on one facilitator call (verify or settle), FACILITATOR_TIMEOUT_MS. */
  facilitatorTimeoutMs: number;
  /** The least a paid model call tops up, µUSDC (X402_CALL_MIN_USD; at least the 1 USD minimum top-up). */
  callMinMicro: number;
  /** Whether POST /v1/topup can take money: PAY_TO, a facilitator and at least one asset. */
  enabled: boolean;
}
