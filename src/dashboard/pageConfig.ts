/**
 * What the server tells the page about its deployment, inlined into the HTML as JSON (no extra request before
 * the first paint). Shared by the route that writes it and the page that reads it.
 */
export interface PageConfig {
  /** The server's SIWE rules, for when GET /v1/auth/siwe is not there (docs/clients.md "Signing in"). */
  siwe: { domain: string; chainIds: number[]; maxAgeS: number; skewS: number };
  /** The settlement network; `explorer` is a block explorer's base URL on real networks, null on a local chain. */
  network: { name: string; chainId: number; testnet: boolean; explorer: string | null };
  /** Accepted top-up assets, in the server's order. */
  assets: { symbol: string; address: string; decimals: number }[];
  topupsEnabled: boolean;
  minTopupUsd: number;
}
