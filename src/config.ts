import { existsSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import defaultCatalog from "../config/models.json";
import { type Catalog, CatalogError, parseCatalog } from "./providers/catalog.ts";
import type { LogLevel } from "./log.ts";

/** A bad setting: start-up stops with one line that names the variable. */
export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    problem: string,
  ) {
    super(`${variable}: ${problem}`);
  }
}

export type Deployment = "production" | "staging" | "local";

/** Everything the gateway reads from its environment, validated once (design §7). */
export interface Config {
  port: number;
  host: string;
  redisUrl?: string;
  databaseUrl?: string;
  dataDir: string;
  modelsFile: string;
  catalog: Catalog;
  deployment: Deployment;
  chainId: number;
  siweDomain: string;
  siweChainIds: number[];
  logLevel: LogLevel;
  rateLimitRequests: number;
  rateLimitWindowMs: number;
  upstreamTimeoutMs: number;
  ledgerShards: number;
  /** A hold outlives the longest allowed upstream call, so only a crashed gateway's holds expire. */
  holdTtlMs: number;
  payments: {
    network?: string;
    payTo?: string;
    facilitatorUrl?: string;
    facilitator?: string;
    rpcUrl?: string;
    relayerPrivateKey?: string;
    assetsFile?: string;
  };
}

const DEFAULT_CHAIN: Record<Deployment, number> = { production: 8453, staging: 84532, local: 31337 };

type Env = Record<string, string | undefined>;

function int(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `must be a whole number, got "${raw}"`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(name, `must be between ${min} and ${max}, got ${n}`);
  return n;
}

function url(env: Env, name: string, protocols: string[]): string | undefined {
  const raw = env[name];
  if (!raw) return undefined;
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new ConfigError(name, "is not a URL");
  }
  if (!protocols.includes(u.protocol)) throw new ConfigError(name, `must start with ${protocols.join(" or ")}`);
  return raw;
}

function oneOf<T extends string>(env: Env, name: string, values: readonly T[], fallback: T): T {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  if (!(values as readonly string[]).includes(raw)) throw new ConfigError(name, `must be one of ${values.join(", ")}, got "${raw}"`);
  return raw as T;
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
  const siweDomain = env.SIWE_DOMAIN || `${host === "0.0.0.0" || host === "::" ? "localhost" : host}:${port}`;
  if (!/^[A-Za-z0-9.-]+(:\d+)?$/.test(siweDomain)) throw new ConfigError("SIWE_DOMAIN", `must be a host[:port], got "${siweDomain}"`);

  const upstreamTimeoutMs = int(env, "UPSTREAM_TIMEOUT_MS", 120_000, 1, 3_600_000);
  return {
    port,
    host,
    redisUrl: url(env, "REDIS_URL", ["redis:", "rediss:"]),
    databaseUrl: url(env, "DATABASE_URL", ["postgres:", "postgresql:"]),
    dataDir: resolve(env.DATA_DIR || "./data"),
    modelsFile,
    catalog,
    deployment,
    chainId,
    siweDomain,
    siweChainIds,
    logLevel: oneOf(env, "LOG_LEVEL", ["debug", "info", "warn", "error"] as const, "info"),
    rateLimitRequests: int(env, "RATE_LIMIT_REQUESTS", 600, 1, 10_000_000),
    rateLimitWindowMs: int(env, "RATE_LIMIT_WINDOW_S", 60, 1, 86_400) * 1000,
    upstreamTimeoutMs,
    ledgerShards: int(env, "LEDGER_SHARDS", 16, 1, 1024),
    holdTtlMs: 2 * upstreamTimeoutMs + 60_000,
    payments: {
      network: env.X402_NETWORK,
      payTo: env.PAY_TO,
      facilitatorUrl: url(env, "FACILITATOR_URL", ["http:", "https:"]),
      facilitator: env.FACILITATOR,
      rpcUrl: url(env, "RPC_URL", ["http:", "https:", "ws:", "wss:"]),
      relayerPrivateKey: env.RELAYER_PRIVATE_KEY,
      assetsFile: env.ASSETS_FILE,
    },
  };
}
