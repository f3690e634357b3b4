import { existsSync, readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { resolve } from "node:path";
import defaultCatalog from "../config/models.json";
import { type Catalog, CatalogError, parseCatalog } from "./providers/catalog.ts";
import { wantsLocalModel } from "./providers/localModel.ts";
import type { Deployment, Env } from "./config/env.ts";
import { loadPayments } from "./config/payments.ts";
import { readSettings, type Settings } from "./config/settings.ts";
import { ConfigError, type ErrorShape } from "./errors.ts";
import type { LogLevel } from "./log.ts";
import type { PaymentsConfig } from "./payments/config.ts";
import type { ClusterTarget } from "./redis/target.ts";

// Declared in errors.ts (lower floors raise it too); start-up code imports it from here with the rest of the config.
export { ConfigError };
// Declared in config/env.ts beside the readers, since the payment rules (config/payments.ts) turn on it too.
export type { Deployment };

/** The settings the Config carries as read (config/settings.ts declares each: variable, type, default, range, doc). */
type AsRead = Pick<
  Settings,
  | "port"
  | "host"
  | "redisUrl"
  | "databaseUrl"
  | "deployment"
  | "logLevel"
  | "rateLimitRequests"
  | "upstreamTimeoutMs"
  | "maxBodyBytes"
  | "bodyTimeoutMs"
  | "streamMaxMs"
  | "ledgerShards"
  | "maxKeysPerWallet"
  | "idleTimeoutS"
  | "responsesStoreTtlS"
  | "responsesStoreItemBytes"
  | "responsesStoreConversationBytes"
  | "responsesStoreWalletBytes"
  | "responsesStoreWalletResponses"
  | "errorShape"
>;

/** Everything the gateway reads from its environment, validated once (docs/operating.md "Configuration"): the settings, and what follows from them. */
export interface Config extends AsRead {
  /** REDIS_CLUSTER_NODES (seeds) and REDIS_PASSWORD: a Redis Cluster instead of one Redis. */
  redisCluster?: ClusterTarget;
  /** DATA_DIR, absolute. */
  dataDir: string;
  /** MODELS_FILE, absolute (config/models.json when unset). */
  modelsFile: string;
  catalog: Catalog;
  /** No provider serves, no MODELS_FILE, local deployment: `serve` adds the in-process local test model (providers/localModel.ts). */
  localModel: boolean;
  /** CHAIN_ID, else the deployment's chain. */
  chainId: number;
  siweDomain: string;
  /** siweDomain first; in local mode with a loopback domain, the other loopback spellings of the same port too. */
  siweDomains: string[];
  siweChainIds: number[];
  /**
   * PUBLIC_URL: the gateway's address as clients reach it (origin, and a path prefix if any, no trailing slash). Payment
   * URLs (402 terms, /.well-known/x402) are built on it, never on a request's Host, which a client (or a cache
   * serving others) would choose. Unset: https://SIWE_DOMAIN (http:// in local mode).
   */
  publicUrl: string;
  /** Origins a browser may call from: "*" (any) or an exact list. */
  corsOrigins: "*" | string[];
  /** RATE_LIMIT_WINDOW_S in ms. */
  rateLimitWindowMs: number;
  /** PROVIDER_PROBE_INTERVAL_S in ms: how often keyless providers are probed for GET /v1/models' `available`. */
  providerProbeIntervalMs: number;
  /** Processes serving the port (WORKERS: a number or "auto", the cores available); 1 serves from this process alone. */
  workers: number;
  /** A hold outlives the longest allowed upstream call, so only a crashed gateway's holds expire. */
  holdTtlMs: number;
  /** CREDIT_LEASES=on: requests are admitted in memory against a lease on the wallet's credit (billing/leases.ts). */
  creditLeases: boolean;
  /** LEASE_TTL_S in ms: a lease's expiry in Redis after each renew; a killed process's leased credit is free again within it. */
  leaseTtlMs: number;
  payments: PaymentsConfig;
}

// Local uses Base Sepolia's id like the dev chain of scripts/dev.sh: x402 v1 clients sign only for networks on their
// fixed list, so one id serves SIWE and top-ups in both local scripts.
const DEFAULT_CHAIN: Record<Deployment, number> = { production: 8453, staging: 84532, local: 84532 };

// Not "[::1]": EIP-4361 libraries (viem's among them, which the verifier uses) refuse an IPv6 literal as the domain.
const LOOPBACK = ["localhost", "127.0.0.1"];

/** A loopback domain in local mode is reachable by two spellings; a browser or script may use either. */
function siweDomainsFor(domain: string, deployment: Deployment): string[] {
  const [, host, port] = /^(.*?)(:\d+)?$/.exec(domain)!;
  if (deployment !== "local" || !LOOPBACK.includes(host!)) return [domain];
  return [domain, ...LOOPBACK.filter((h) => h !== host).map((h) => h + (port ?? ""))];
}

/** CORS_ORIGINS: unset or "*" → any origin (the API authenticates by bearer key or signature, never cookies). */
function corsOrigins(raw: string | undefined): "*" | string[] {
  raw = raw?.trim();
  if (!raw || raw === "*") return "*";
  return raw.split(",").map((o) => {
    o = o.trim();
    let origin: string | undefined;
    try {
      origin = new URL(o).origin;
    } catch {
      // reported below
    }
    if (origin !== o)
      throw new ConfigError("CORS_ORIGINS", `must be "*" or comma-separated origins like https://app.example.com (no path), got "${o}"`);
    return o;
  });
}

/** REDIS_CLUSTER_NODES: `host:port` seeds of a Redis Cluster; it and REDIS_URL name two different Redis setups. */
function redisCluster(s: Settings): ClusterTarget | undefined {
  const raw = s.redisClusterNodes?.trim();
  if (!raw) {
    if (s.redisPassword)
      throw new ConfigError(
        "REDIS_PASSWORD",
        "is for REDIS_CLUSTER_NODES; with REDIS_URL put the password in the URL (redis://:password@host:port)",
      );
    return undefined;
  }
  if (s.redisUrl)
    throw new ConfigError(
      "REDIS_CLUSTER_NODES",
      "and REDIS_URL are both set: set REDIS_URL for one Redis or REDIS_CLUSTER_NODES for a Redis Cluster, not both",
    );
  const nodes = raw.split(",").map((seed) => {
    const m = /^\s*([A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\]):(\d{1,5})\s*$/.exec(seed);
    const port = Number(m?.[2]);
    if (!m || port < 1 || port > 65535)
      throw new ConfigError("REDIS_CLUSTER_NODES", `must be comma-separated host:port seeds, got "${seed.trim()}"`);
    return { host: m[1]!.replace(/^\[|\]$/g, ""), port };
  });
  return { cluster: nodes, password: s.redisPassword || undefined };
}

/**
 * Reads and validates the whole configuration (config/settings.ts reads each variable), then derives what follows
 * from the settings; throws ConfigError naming the first bad variable.
 */
export function loadConfig(env: Env = process.env): Config {
  const s = readSettings(env);
  const { port, host, deployment } = s;
  const chainId = s.chainId ?? DEFAULT_CHAIN[deployment];
  // Unset: ./config/models.json, else the catalog built into the program (another directory, compiled binary).
  const modelsFile = resolve(s.modelsFile || "config/models.json");
  const builtIn = !s.modelsFile && !existsSync(modelsFile);

  let catalog: Catalog;
  try {
    catalog = parseCatalog(builtIn ? defaultCatalog : JSON.parse(readFileSync(modelsFile, "utf8")), env);
  } catch (e) {
    const why = e instanceof CatalogError ? e.message : e instanceof SyntaxError ? `invalid JSON (${e.message})` : "cannot be read";
    throw new ConfigError("MODELS_FILE", `${modelsFile}: ${why}`);
  }

  const siweChainIds = (s.siweChainIds || String(chainId)).split(",").map((id) => {
    if (!/^\d+$/.test(id.trim())) throw new ConfigError("SIWE_CHAIN_IDS", `must be comma-separated chain ids, got "${id}"`);
    return Number(id.trim());
  });
  const listenHost = host === "0.0.0.0" || host === "::" ? "localhost" : host.includes(":") ? `[${host}]` : host;
  const siweDomain = s.siweDomain || `${listenHost}:${port}`;
  if (!/^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(:\d+)?$/.test(siweDomain))
    throw new ConfigError("SIWE_DOMAIN", `must be a host[:port], got "${siweDomain}"`);

  const publicUrl = (s.publicUrl ?? `${deployment === "local" ? "http" : "https"}://${siweDomain}`).replace(/\/+$/, "");
  if (/[?#]/.test(publicUrl)) throw new ConfigError("PUBLIC_URL", `must be an origin or a path prefix (no query), got "${publicUrl}"`);

  return {
    port,
    host,
    redisUrl: s.redisUrl,
    redisCluster: redisCluster(s),
    databaseUrl: s.databaseUrl,
    dataDir: resolve(s.dataDir),
    modelsFile,
    catalog,
    localModel: wantsLocalModel(catalog, Boolean(s.modelsFile), deployment),
    deployment,
    chainId,
    siweDomain,
    siweDomains: siweDomainsFor(siweDomain, deployment),
    siweChainIds,
    publicUrl,
    corsOrigins: corsOrigins(s.corsOrigins),
    logLevel: s.logLevel,
    rateLimitRequests: s.rateLimitRequests,
    rateLimitWindowMs: s.rateLimitWindowS * 1000,
    upstreamTimeoutMs: s.upstreamTimeoutMs,
    maxBodyBytes: s.maxBodyBytes,
    bodyTimeoutMs: s.bodyTimeoutMs,
    streamMaxMs: s.streamMaxMs,
    ledgerShards: s.ledgerShards,
    maxKeysPerWallet: s.maxKeysPerWallet,
    idleTimeoutS: s.idleTimeoutS,
    responsesStoreTtlS: s.responsesStoreTtlS,
    responsesStoreItemBytes: s.responsesStoreItemBytes,
    responsesStoreConversationBytes: s.responsesStoreConversationBytes,
    responsesStoreWalletBytes: s.responsesStoreWalletBytes,
    responsesStoreWalletResponses: s.responsesStoreWalletResponses,
    providerProbeIntervalMs: s.providerProbeIntervalS * 1000,
    errorShape: s.errorShape,
    workers: s.workers === "auto" ? availableParallelism() : s.workers,
    holdTtlMs: 2 * s.upstreamTimeoutMs + 60_000,
    creditLeases: s.creditLeases === "on",
    leaseTtlMs: s.leaseTtlS * 1000,
    payments: loadPayments(s, chainId),
  };
}
