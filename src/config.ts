import { existsSync, readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { resolve } from "node:path";
import defaultCatalog from "../config/models.json";
import { type Catalog, CatalogError, parseCatalog } from "./providers/catalog.ts";
import { wantsLocalModel } from "./providers/localModel.ts";
import { type Deployment, type Env, int, oneOf, url } from "./config/env.ts";
import { loadPayments } from "./config/payments.ts";
import { ConfigError, type ErrorShape } from "./errors.ts";
import type { LogLevel } from "./log.ts";
import type { PaymentsConfig } from "./payments/config.ts";
import type { ClusterTarget } from "./redis/target.ts";

// Declared in errors.ts (lower floors raise it too); start-up code imports it from here with the rest of the config.
export { ConfigError };
// Declared in config/env.ts beside the readers, since the payment rules (config/payments.ts) turn on it too.
export type { Deployment };

/** Everything the gateway reads from its environment, validated once (docs/operating.md "Configuration"). */
export interface Config {
  port: number;
  host: string;
  redisUrl?: string;
  /** REDIS_CLUSTER_NODES (seeds) and REDIS_PASSWORD: a Redis Cluster instead of one Redis. */
  redisCluster?: ClusterTarget;
  databaseUrl?: string;
  dataDir: string;
  modelsFile: string;
  catalog: Catalog;
  /** No provider serves, no MODELS_FILE, local deployment: `serve` adds the in-process local test model (providers/localModel.ts). */
  localModel: boolean;
  deployment: Deployment;
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
  logLevel: LogLevel;
  rateLimitRequests: number;
  rateLimitWindowMs: number;
  upstreamTimeoutMs: number;
  /** Largest request body (MAX_BODY_BYTES): a longer one is 413 before it is read further. */
  maxBodyBytes: number;
  /** A request body not fully received this long after its headers is 408 and its connection closed (BODY_TIMEOUT_MS). */
  bodyTimeoutMs: number;
  /** IDLE_TIMEOUT_S: a connection on which no byte moved this long is closed (a POST gets its own: requestWaitS). */
  idleTimeoutS: number;
  /** Total time cap of one stream (a client that stops reading keeps it open); it is then charged what it produced. */
  streamMaxMs: number;
  ledgerShards: number;
  /** MAX_KEYS_PER_WALLET: active (unrevoked) API keys one wallet may have; key creation past it is 409 KEY_LIMIT_REACHED. */
  maxKeysPerWallet: number;
  /** How long a stored Responses API response stays usable by previous_response_id / item_reference (RESPONSES_STORE_TTL_S). */
  responsesStoreTtlS: number;
  /** Bounds of the Responses store (RESPONSES_STORE_MAX_*): one item's JSON, one stored conversation, one wallet's over a lifetime. */
  responsesStoreItemBytes: number;
  responsesStoreConversationBytes: number;
  responsesStoreWalletBytes: number;
  responsesStoreWalletResponses: number;
  /** PROVIDER_PROBE_INTERVAL_S: how often keyless providers are probed for GET /v1/models' `available`. */
  providerProbeIntervalMs: number;
  /** ERROR_SHAPE: the envelope of errors on the OpenAI-compatible routes (chat completions, models); the spec's by default. */
  errorShape: ErrorShape;
  /** Processes serving the port (WORKERS: a number or "auto", the cores available); 1 serves from this process alone. */
  workers: number;
  /** A hold outlives the longest allowed upstream call, so only a crashed gateway's holds expire. */
  holdTtlMs: number;
  /** CREDIT_LEASES=on: requests are admitted in memory against a lease on the wallet's credit (billing/leases.ts). */
  creditLeases: boolean;
  /** LEASE_TTL_S: a lease's expiry in Redis after each renew; a killed process's leased credit is free again within it. */
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
function corsOrigins(env: Env): "*" | string[] {
  const raw = env.CORS_ORIGINS?.trim();
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
function redisCluster(env: Env): ClusterTarget | undefined {
  const raw = env.REDIS_CLUSTER_NODES?.trim();
  if (!raw) {
    if (env.REDIS_PASSWORD)
      throw new ConfigError(
        "REDIS_PASSWORD",
        "is for REDIS_CLUSTER_NODES; with REDIS_URL put the password in the URL (redis://:password@host:port)",
      );
    return undefined;
  }
  if (env.REDIS_URL)
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
  return { cluster: nodes, password: env.REDIS_PASSWORD || undefined };
}

/** WORKERS: a whole number, or "auto" for the cores this process may use (a container's CPU limit included). */
function workers(env: Env): number {
  if (env.WORKERS === "auto") return availableParallelism();
  if (env.WORKERS && !/^\d+$/.test(env.WORKERS)) throw new ConfigError("WORKERS", `must be a whole number or "auto", got "${env.WORKERS}"`);
  return int(env, "WORKERS", 1, 1, 64);
}

/** Reads and validates the whole configuration; throws ConfigError naming the first bad variable. */
export function loadConfig(env: Env = process.env): Config {
  const port = int(env, "PORT", 8080, 0, 65535);
  const host = env.HOST || "0.0.0.0";
  const deployment = oneOf(env, "DEPLOYMENT", ["production", "staging", "local"] as const, "local");
  const chainId = int(env, "CHAIN_ID", DEFAULT_CHAIN[deployment], 1, 2 ** 32);
  // Unset: ./config/models.json, else the catalog built into the program (another directory, compiled binary).
  const modelsFile = resolve(env.MODELS_FILE || "config/models.json");
  const builtIn = !env.MODELS_FILE && !existsSync(modelsFile);

  let catalog: Catalog;
  try {
    catalog = parseCatalog(builtIn ? defaultCatalog : JSON.parse(readFileSync(modelsFile, "utf8")), env);
  } catch (e) {
    const why = e instanceof CatalogError ? e.message : e instanceof SyntaxError ? `invalid JSON (${e.message})` : "cannot be read";
    throw new ConfigError("MODELS_FILE", `${modelsFile}: ${why}`);
  }

  const siweChainIds = (env.SIWE_CHAIN_IDS || String(chainId)).split(",").map((s) => {
    if (!/^\d+$/.test(s.trim())) throw new ConfigError("SIWE_CHAIN_IDS", `must be comma-separated chain ids, got "${s}"`);
    return Number(s.trim());
  });
  const listenHost = host === "0.0.0.0" || host === "::" ? "localhost" : host.includes(":") ? `[${host}]` : host;
  const siweDomain = env.SIWE_DOMAIN || `${listenHost}:${port}`;
  if (!/^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(:\d+)?$/.test(siweDomain))
    throw new ConfigError("SIWE_DOMAIN", `must be a host[:port], got "${siweDomain}"`);

  const publicUrl = (url(env, "PUBLIC_URL", ["http:", "https:"]) ?? `${deployment === "local" ? "http" : "https"}://${siweDomain}`).replace(
    /\/+$/,
    "",
  );
  if (/[?#]/.test(publicUrl)) throw new ConfigError("PUBLIC_URL", `must be an origin or a path prefix (no query), got "${publicUrl}"`);

  const upstreamTimeoutMs = int(env, "UPSTREAM_TIMEOUT_MS", 120_000, 1, 3_600_000);
  return {
    port,
    host,
    redisUrl: url(env, "REDIS_URL", ["redis:", "rediss:"]),
    redisCluster: redisCluster(env),
    databaseUrl: url(env, "DATABASE_URL", ["postgres:", "postgresql:"]),
    dataDir: resolve(env.DATA_DIR || "./data"),
    modelsFile,
    catalog,
    localModel: wantsLocalModel(catalog, Boolean(env.MODELS_FILE), deployment),
    deployment,
    chainId,
    siweDomain,
    siweDomains: siweDomainsFor(siweDomain, deployment),
    siweChainIds,
    publicUrl,
    corsOrigins: corsOrigins(env),
    logLevel: oneOf(env, "LOG_LEVEL", ["debug", "info", "warn", "error"] as const, "info"),
    rateLimitRequests: int(env, "RATE_LIMIT_REQUESTS", 600, 1, 10_000_000),
    rateLimitWindowMs: int(env, "RATE_LIMIT_WINDOW_S", 60, 1, 86_400) * 1000,
    upstreamTimeoutMs,
    // 32 MiB: a full 1M-token context is ~4 MB of text and images come base64-encoded. 60 s: that much over a slow
    // uplink, while a client trickling its body holds a connection (never credit) at most that long.
    maxBodyBytes: int(env, "MAX_BODY_BYTES", 32 * 1024 * 1024, 1024, 1024 * 1024 * 1024),
    bodyTimeoutMs: int(env, "BODY_TIMEOUT_MS", 60_000, 100, 3_600_000),
    // Above the 60 s idle timeout of common load balancers, which must close an idle connection before the gateway does.
    idleTimeoutS: int(env, "IDLE_TIMEOUT_S", 75, 1, 255),
    // Longer than any answer a model streams at a reading client's pace (128k tokens at ~50 tokens/s is ~45 min).
    streamMaxMs: int(env, "STREAM_MAX_MS", 2 * 3600_000, 1, 24 * 3600_000),
    // 48 spreads evenly over 2, 3, 4, 6 or 8 cluster masters (keys.ts); a ledger built with another count keeps it.
    ledgerShards: int(env, "LEDGER_SHARDS", 48, 1, 1024),
    // One per app, agent or teammate a wallet hands a key to; each key is a row and a Redis hash for good.
    maxKeysPerWallet: int(env, "MAX_KEYS_PER_WALLET", 100, 1, 1_000_000),
    // An hour: long enough for an agent's tool loop and a chat session's pauses; beyond, clients resend the conversation.
    responsesStoreTtlS: int(env, "RESPONSES_STORE_TTL_S", 3600, 1, 30 * 86_400),
    // A long message, a conversation of a 1M-token context (~4 MB of text), and per wallet within one lifetime 16 of
    // those or 10,000 responses: what an agent's loop keeps, while one paying wallet cannot fill Redis.
    responsesStoreItemBytes: int(env, "RESPONSES_STORE_MAX_ITEM_BYTES", 1024 * 1024, 1024, 1024 * 1024 * 1024),
    responsesStoreConversationBytes: int(env, "RESPONSES_STORE_MAX_CONVERSATION_BYTES", 4 * 1024 * 1024, 1024, 1024 * 1024 * 1024),
    responsesStoreWalletBytes: int(env, "RESPONSES_STORE_MAX_WALLET_BYTES", 64 * 1024 * 1024, 1024, 1024 ** 4),
    responsesStoreWalletResponses: int(env, "RESPONSES_STORE_MAX_WALLET_RESPONSES", 10_000, 1, 100_000_000),
    // Half a minute: a local server started or stopped shows in the list about as soon as a person looks again.
    providerProbeIntervalMs: int(env, "PROVIDER_PROBE_INTERVAL_S", 30, 1, 86_400) * 1000,
    errorShape: oneOf(env, "ERROR_SHAPE", ["spec", "openai"] as const, "spec"),
    workers: workers(env),
    holdTtlMs: 2 * upstreamTimeoutMs + 60_000,
    // Off by default: an idle lease shows as locked credit in GET /v1/balance for up to 2 s, and a revoke made
    // through another process bites within a second instead of at once (README "Credit leases").
    creditLeases: oneOf(env, "CREDIT_LEASES", ["on", "off"] as const, "off") === "on",
    // Renewed every 250 ms while used: ten seconds outlive any stall of the process short of a crash.
    leaseTtlMs: int(env, "LEASE_TTL_S", 10, 2, 3600) * 1000,
    payments: loadPayments(env, deployment, chainId),
  };
}
