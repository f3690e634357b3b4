/**
 * Every setting the gateway reads from its environment, declared once: its variable, type, default, range and one
 * line of doc, and how it is read. The Config type's setting fields (config.ts), the loader, the docs table
 * (docs/operating.md, Configuration) and `serve --help` all come from this table; test/config.settings.unit.test.ts
 * checks they agree and that nothing reads a variable the table does not declare. A new setting is a new row.
 */
import { parseUsd } from "../billing/money.ts";
import { ConfigError } from "../errors.ts";
import { NETWORK_IDS } from "../payments/networks.ts";
import { type Env, int, oneOf } from "./env.ts";
import { choice, link, optionalText, wholeOrAuto, renderHelp, renderTable, type Setting, text, whole, wholeOrUnset } from "./setting.ts";

export type { Setting };

const ADDRESS = /^0x[0-9a-fA-F]{40}$/;

/** The settings, keyed by the Config field (or the loader's name) each one becomes. */
export const SETTINGS = {
  // server
  port: whole("PORT", "server", 8080, 0, 65535, "the HTTP port (0: any free port)"),
  host: text("HOST", "server", "address", "0.0.0.0", "the address to listen on"),
  deployment: choice(
    "DEPLOYMENT",
    "server",
    ["production", "staging", "local"] as const,
    "local",
    "production (mainnet), staging (testnet) or local (dev chain); sets the defaults of the chain and payment settings",
  ),
  logLevel: choice("LOG_LEVEL", "server", ["debug", "info", "warn", "error"] as const, "info", "JSON lines on stdout, secrets redacted"),
  corsOrigins: text(
    "CORS_ORIGINS",
    "server",
    '"*" or origins',
    "*",
    "origins a browser may call from: * (any) or comma-separated origins like https://app.example.com",
  ),
  errorShape: choice(
    "ERROR_SHAPE",
    "server",
    ["spec", "openai"] as const,
    "spec",
    "the error body of the OpenAI-compatible routes: openai lets OpenAI SDKs and LangChain show the gateway's message and code",
  ),
  // storage
  redisUrl: link(
    "REDIS_URL",
    "storage",
    ["redis:", "rediss:"],
    "one Redis; unset (and no REDIS_CLUSTER_NODES): a private redis-server (AOF) in DATA_DIR",
    "unset: embedded",
  ),
  redisClusterNodes: optionalText(
    "REDIS_CLUSTER_NODES",
    "storage",
    "host:port list",
    "comma-separated seeds of a Redis Cluster (the rest is discovered); excludes REDIS_URL",
  ),
  redisPassword: optionalText("REDIS_PASSWORD", "storage", "text", "the Redis Cluster's password (with REDIS_URL, put it in the URL)"),
  databaseUrl: link(
    "DATABASE_URL",
    "storage",
    ["postgres:", "postgresql:"],
    "Postgres; unset: embedded Postgres (native, or PGlite where its binaries do not run) in DATA_DIR",
    "unset: embedded",
  ),
  dataDir: text("DATA_DIR", "storage", "path", "./data", "where the embedded Redis and Postgres keep their data"),
  ledgerShards: whole(
    "LEDGER_SHARDS",
    "storage",
    48,
    1,
    1024,
    "Redis hash-tag shards of the ledger; fixed for the life of a ledger (48 spreads evenly over 2, 3, 4, 6 or 8 cluster masters)",
  ),
  // models
  modelsFile: optionalText(
    "MODELS_FILE",
    "models",
    "path",
    "the model catalog (docs/catalog.md, Models and providers); setting it turns the local test model off",
    "unset: config/models.json, else the built-in copy",
  ),
  providerProbeIntervalS: whole(
    "PROVIDER_PROBE_INTERVAL_S",
    "models",
    30,
    1,
    86_400,
    "seconds between reachability probes of keyless providers (`available` in GET /v1/models)",
  ),
  upstreamTimeoutMs: whole(
    "UPSTREAM_TIMEOUT_MS",
    "models",
    120_000,
    1,
    3_600_000,
    "deadline of a provider call (streams: the first byte and each idle gap); 504 past it",
  ),
  streamMaxMs: whole(
    "STREAM_MAX_MS",
    "models",
    2 * 3600_000,
    1,
    24 * 3600_000,
    "total time cap of one stream (a client that stops reading keeps it open); it is then charged what it produced",
  ),
  responsesStoreTtlS: whole(
    "RESPONSES_STORE_TTL_S",
    "models",
    3600,
    1,
    30 * 86_400,
    "how long a stored POST /v1/responses answer stays usable by previous_response_id / item_reference",
  ),
  responsesStoreItemBytes: whole(
    "RESPONSES_STORE_MAX_ITEM_BYTES",
    "models",
    1024 * 1024,
    1024,
    1024 * 1024 * 1024,
    "the largest stored Responses item (JSON bytes)",
  ),
  responsesStoreConversationBytes: whole(
    "RESPONSES_STORE_MAX_CONVERSATION_BYTES",
    "models",
    4 * 1024 * 1024,
    1024,
    1024 * 1024 * 1024,
    "the largest stored Responses conversation (JSON bytes)",
  ),
  responsesStoreWalletBytes: whole(
    "RESPONSES_STORE_MAX_WALLET_BYTES",
    "models",
    64 * 1024 * 1024,
    1024,
    1024 ** 4,
    "what one wallet may store in the Responses store within one TTL (bytes)",
  ),
  responsesStoreWalletResponses: whole(
    "RESPONSES_STORE_MAX_WALLET_RESPONSES",
    "models",
    10_000,
    1,
    100_000_000,
    "how many responses one wallet may store within one TTL",
  ),
  // sign-in
  chainId: wholeOrUnset(
    "CHAIN_ID",
    "sign-in",
    1,
    2 ** 32,
    "the chain of SIWE and payments",
    "by DEPLOYMENT: 8453 production, 84532 staging and local",
  ),
  siweDomain: optionalText("SIWE_DOMAIN", "sign-in", "host[:port]", "the domain SIWE messages must name", "the listen host:port"),
  siweChainIds: optionalText("SIWE_CHAIN_IDS", "sign-in", "chain ids", "comma-separated chain ids a SIWE message may name", "CHAIN_ID"),
  publicUrl: link(
    "PUBLIC_URL",
    "sign-in",
    ["http:", "https:"],
    "the gateway's address as clients reach it (origin, optionally a path prefix): payment URLs in 402 terms and /.well-known/x402 are built on it, never on a request's Host",
    "https://SIWE_DOMAIN (http:// in local mode)",
  ),
  // limits
  rateLimitRequests: whole(
    "RATE_LIMIT_REQUESTS",
    "limits",
    600,
    1,
    10_000_000,
    "requests per wallet per window; 429 with Retry-After and X-RateLimit-* past it",
  ),
  rateLimitWindowS: whole("RATE_LIMIT_WINDOW_S", "limits", 60, 1, 86_400, "the rate limit's sliding window, in seconds"),
  maxBodyBytes: whole(
    "MAX_BODY_BYTES",
    "limits",
    32 * 1024 * 1024,
    1024,
    1024 * 1024 * 1024,
    "largest request body: 413 PAYLOAD_TOO_LARGE past it, connection closed (32 MiB holds a 1M-token context and base64 images)",
  ),
  bodyTimeoutMs: whole(
    "BODY_TIMEOUT_MS",
    "limits",
    60_000,
    100,
    3_600_000,
    "a request body not received this long after its headers is 408 REQUEST_TIMEOUT, connection closed",
  ),
  idleTimeoutS: whole(
    "IDLE_TIMEOUT_S",
    "limits",
    75,
    1,
    255,
    "a connection on which no byte moved this long is closed (above common load balancers' 60 s); a POST gets its own wait",
  ),
  maxKeysPerWallet: whole(
    "MAX_KEYS_PER_WALLET",
    "limits",
    100,
    1,
    1_000_000,
    "active API keys one wallet may have; creating another is 409 KEY_LIMIT_REACHED until one is revoked (Limits)",
  ),
  // scaling
  workers: wholeOrAuto("WORKERS", "scaling", 1, 1, 64, "processes serving the port; auto: the cores this process may use"),
  creditLeases: choice(
    "CREDIT_LEASES",
    "scaling",
    ["on", "off"] as const,
    "off",
    "on: most chat requests are admitted in memory against a per-key lease on the wallet's credit (docs/design.md, Credit leases)",
  ),
  leaseTtlS: whole(
    "LEASE_TTL_S",
    "scaling",
    10,
    2,
    3600,
    "a lease's expiry after its last renew: a killed process's leased credit is free again within it",
  ),
  heapHint: optionalText(
    "BUN_JSC_forceRAMSize",
    "scaling",
    "bytes",
    "RAM JavaScriptCore sizes its heap growth by; serve sets it (512 MiB, or the memory limit if lower) when unset",
    "set by serve",
  ),
  // payments
  x402Network: {
    name: "X402_NETWORK",
    group: "payments",
    type: NETWORK_IDS.join(" \\| "),
    default: "by DEPLOYMENT: base, base-sepolia, local",
    doc: "the network top-ups settle on",
    read: (env: Env) => (env.X402_NETWORK ? oneOf(env, "X402_NETWORK", NETWORK_IDS, NETWORK_IDS[0]!) : undefined),
  },
  payTo: {
    name: "PAY_TO",
    group: "payments",
    type: "0x address",
    default: "unset: top-ups off (required outside local)",
    doc: "the address top-ups are paid to",
    read: (env: Env): `0x${string}` | undefined => {
      const raw = env.PAY_TO;
      if (!raw) return undefined;
      if (!ADDRESS.test(raw)) throw new ConfigError("PAY_TO", "must be a 0x-prefixed 20-byte address");
      return raw.toLowerCase() as `0x${string}`;
    },
  },
  facilitator: {
    name: "FACILITATOR",
    group: "payments",
    type: "local \\| http",
    default: "http when FACILITATOR_URL is set",
    doc: "local: verify and settle in-process through RPC_URL and the relayer; http: an x402 facilitator at FACILITATOR_URL",
    read: (env: Env) => (env.FACILITATOR ? oneOf(env, "FACILITATOR", ["local", "http"] as const, "http") : undefined),
  },
  facilitatorUrl: link("FACILITATOR_URL", "payments", ["http:", "https:"], "an x402 facilitator"),
  facilitatorTimeoutMs: whole("FACILITATOR_TIMEOUT_MS", "payments", 30_000, 100, 600_000, "deadline of a facilitator call"),
  rpcUrl: link("RPC_URL", "payments", ["http:", "https:"], "the chain's JSON-RPC (FACILITATOR=local, permit assets, payment recovery)"),
  relayerPrivateKey: {
    name: "RELAYER_PRIVATE_KEY",
    group: "payments",
    type: "0x + 64 hex",
    default: "unset",
    doc: "the key that sends settlement transactions (FACILITATOR=local, permit assets)",
    read: (env: Env): `0x${string}` | undefined => {
      const raw = env.RELAYER_PRIVATE_KEY || undefined;
      if (raw && !/^0x[0-9a-fA-F]{64}$/.test(raw)) throw new ConfigError("RELAYER_PRIVATE_KEY", "must be 0x followed by 64 hex digits");
      return raw as `0x${string}` | undefined;
    },
  },
  assetsFile: optionalText(
    "ASSETS_FILE",
    "payments",
    "path",
    "the accepted assets (JSON) of a local chain, or to replace a network's built-in ones",
    "the network's",
  ),
  callMinMicro: {
    name: "X402_CALL_MIN_USD",
    group: "payments",
    type: "USD",
    default: "1",
    range: "1–1000000, ≤ 6 decimals",
    doc: "the least a paid model call tops up: its 402 offers the shortfall rounded up to a cent, at least this",
    read: (env: Env): number => {
      const raw = env.X402_CALL_MIN_USD;
      if (raw === undefined || raw === "") return 1_000_000;
      const micro = parseUsd(raw);
      if (micro === null || micro < 1_000_000 || micro > 1_000_000_000_000)
        throw new ConfigError("X402_CALL_MIN_USD", `must be a USD amount from 1 to 1000000 with at most 6 decimals, got "${raw}"`);
      return micro;
    },
  },
} satisfies Record<string, Setting<unknown>>;

/** Each setting's value as read (before config.ts derives the rest: defaults that depend on others, units). */
export type Settings = { [K in keyof typeof SETTINGS]: ReturnType<(typeof SETTINGS)[K]["read"]> };

/** Reads every setting, in the table's order; throws ConfigError naming the first bad one. */
export function readSettings(env: Env): Settings {
  const out: Record<string, unknown> = {};
  for (const [key, setting] of Object.entries(SETTINGS)) out[key] = (setting as Setting<unknown>).read(env);
  return out as Settings;
}

/** The docs table (docs/operating.md, Configuration), one row per setting, by group. */
export function settingsTable(): string {
  return renderTable(Object.values(SETTINGS));
}

/** The settings part of `serve --help`: one line per setting, by group. */
export function settingsHelp(): string {
  return renderHelp(Object.values(SETTINGS));
}
