import { afterAll, beforeAll } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from "viem/accounts";
import { createSiweMessage, generateSiweNonce } from "viem/siwe";
import { createApp } from "../../src/app.ts";
import { loadConfig } from "../../src/config.ts";
import { setLogLevel } from "../../src/log.ts";
import { buildServices, type Connections, type Services } from "../../src/wiring.ts";
import { IMAGE_TOKENS as CLAUDE_IMAGE_TOKENS, startAnthropicStandin, type AnthropicStandin } from "./anthropicStandin.ts";
import { catalogModel, STANDIN_KEY, standinProvider } from "./catalog.ts";
import { startForwarder, type Forwarder } from "./forwarder.ts";
import { startStandin, type Standin } from "./openaiStandin.ts";
import type { TestCluster } from "./cluster.ts";
import { freshDatabase, privateRedis } from "./services.ts";

export const SIWE_DOMAIN = "gateway.test";
export const BASE = `https://${SIWE_DOMAIN}`;

/** Models of the Anthropic stand-in (provider "claude"): real names for the thinking rules, then failure modes. */
export const CLAUDE_MODELS = [
  "claude-sonnet-4-5",
  "claude-sonnet-4-6",
  "claude-opus-4-7",
  "claude-3-5-haiku",
  "overloaded",
  "rate-limited",
  "invalid",
  "api-error",
  "stream-overloaded",
  "hang",
  "slow",
  "greedy",
  "cached",
];

/**
 * Test catalog: stand-in models (behaviour by upstream name) at round prices, and one unreachable provider.
 * "vision" answers like echo and names the stand-in's image maxima (85 / 1,445) as its own; "underpriced" names
 * 1 token per image, so an image request settles above its hold; "echo" names none, so an image holds its whole
 * context window.
 */
function catalog(standinUrl: string, anthropicUrl: string) {
  const names = [
    "echo",
    "no-usage",
    "fail-400",
    "fail-429",
    "fail-500",
    "garbage",
    "slow",
    "stream-break",
    "stream-error",
    "drip",
    "no-usage-long",
    "hang",
    "endless",
    "greedy",
    "flood",
    "tool-caller",
  ];
  return {
    providers: {
      standin: standinProvider(standinUrl),
      dead: standinProvider("http://127.0.0.1:9/v1"),
      claude: standinProvider(anthropicUrl, "anthropic"),
    },
    models: [
      // Aliases as an operator gives them for agents' own default ids (Codex 0.171's default model and an older one,
      // Claude Code's small one).
      ...names.map((n) => catalogModel("standin", n, n === "tool-caller" ? { aliases: ["gpt-5-codex", "gpt-6.2-sol"] } : {})),
      catalogModel("standin", "vision", { imageTokens: { low: 85, high: 1_445 } }),
      catalogModel("standin", "underpriced", { imageTokens: { low: 1, high: 1 } }),
      catalogModel("dead", "echo"),
      // Cache prices (issue 32): OpenAI's cached input at half the prompt price; Anthropic's reads at 0.1×, 5-minute
      // writes at 1.25×, 1-hour writes at 2× (cost side likewise from the cost prices).
      catalogModel("standin", "cached", { cachedPromptPricePer1M: 1.25, costCachedPromptPer1M: 1 }),
      // OpenAI's GPT-6 family: cached input at 0.05×, writes (unasked, no breakpoint) at 1.25× the prompt price.
      catalogModel("standin", "cache-writes", OPENAI_WRITE_PRICES),
      // A long-context tier past 10 prompt tokens (any stand-in prompt: 10 per message + 1), at 2× and 1.5× the prices.
      catalogModel("standin", "echo", { id: "standin/long-context", longContext: LONG_CONTEXT }),
      ...["cached-1h", "greedy-1h"].map((n) => catalogModel("claude", n, CLAUDE_CACHE_PRICES)),
      catalogModel("claude", "cached", { id: "claude/cached-priced", ...CLAUDE_CACHE_PRICES }),

      // Failover chains (catalog `fallbacks`): a failing first model, then others; "echo-dear" bills twice the prices.
      ...FAILOVER_MODELS,
      ...EMBEDDING_MODELS,
      // The Anthropic stand-in's own image maximum: a model without imageTokens holds the context window per image.
      ...CLAUDE_MODELS.map((n) =>
        catalogModel("claude", n, {
          imageTokens: { low: CLAUDE_IMAGE_TOKENS, high: CLAUDE_IMAGE_TOKENS },
          ...(n === "claude-sonnet-4-5" ? { aliases: ["claude-haiku-4-5"] } : {}),
        }),
      ),
    ],
  };
}

/** The test catalog's long-context tier (standin/long-context): the whole request at 2× the prompt, 1.5× the completion. */
export const LONG_CONTEXT = {
  aboveTokens: 10,
  promptPricePer1MTokens: 5,
  completionPricePer1M: 15,
  costPromptPer1M: 4,
  costCompletionPer1M: 12,
};

/** The test catalog's OpenAI-type cache prices with writes, USD per 1M tokens (cost: of 2). */
export const OPENAI_WRITE_PRICES = {
  cachedPromptPricePer1M: 0.125,
  cacheWritePricePer1M: 3.125,
  costCachedPromptPer1M: 0.1,
  costCacheWritePer1M: 2.5,
};

/** The test catalog's Anthropic cache prices, USD per 1M tokens: 0.1×, 1.25× and 2× its 2.5 prompt (cost: of 2). */
export const CLAUDE_CACHE_PRICES = {
  cachedPromptPricePer1M: 0.25,
  cacheWritePricePer1M: 3.125,
  cacheWrite1hPricePer1M: 5,
  costCachedPromptPer1M: 0.2,
  costCacheWritePer1M: 2.5,
  costCacheWrite1hPer1M: 4,
};

/** A dearer echo: billed 5 and 20 USD per 1M prompt and completion tokens (twice the test catalog's). */
export const DEAR_PRICES = { promptPricePer1MTokens: 5, completionPricePer1M: 20, costPromptPer1M: 4, costCompletionPer1M: 16 };

/** Models whose provider fails before answering, each with `fallbacks` to try next (by the id's suffix). */
const FAILOVER_MODELS = [
  catalogModel("standin", "echo", { id: "standin/echo-dear", ...DEAR_PRICES }),
  catalogModel("standin", "fail-500", { id: "standin/failover-500", fallbacks: ["standin/echo-dear", "standin/echo"] }),
  catalogModel("standin", "fail-429", { id: "standin/failover-429", fallbacks: ["standin/echo"] }),
  catalogModel("standin", "fail-400", { id: "standin/failover-400", fallbacks: ["standin/echo"] }),
  catalogModel("dead", "echo", { id: "dead/failover", fallbacks: ["standin/echo"] }),
  catalogModel("standin", "fail-500", { id: "standin/failover-none", fallbacks: ["dead/echo", "standin/fail-429"] }),
];

/** Embedding models (catalog kind "embedding"): billed 0.1 USD per 1M prompt tokens, nothing generated; a context of 8,192. */
const EMBEDDING = {
  kind: "embedding",
  contextLength: 8_192,
  promptPricePer1MTokens: 0.1,
  completionPricePer1M: 0,
  costPromptPer1M: 0.08,
  costCompletionPer1M: 0,
};
const EMBEDDING_MODELS = [
  catalogModel("standin", "embed", EMBEDDING),
  catalogModel("standin", "embed-no-usage", EMBEDDING),
  catalogModel("standin", "embed-fail-400", EMBEDDING),
  catalogModel("standin", "embed-fail-500", { ...EMBEDDING, id: "standin/embed-failover", fallbacks: ["standin/embed"] }),
];

/** What a fault test needs beyond the defaults. */
export interface GatewayOptions {
  /** Serve the private Redis on this TCP port too, so a child process (a second gateway, an admin command) shares it. */
  redisPort?: number;
  /** Put a forwarder (test/helpers/forwarder.ts) in front of Redis, to take it away and give it back. */
  forwardRedis?: boolean;
  /** The same in front of Postgres. */
  forwardPostgres?: boolean;
  /** Sees every query the services' postgres.js client sends. */
  onQuery?: (query: string) => void;
  /** Run on this Redis Cluster (test/helpers/cluster.ts) instead of a private redis-server. */
  cluster?: TestCluster;
}

export interface TestGateway {
  services: Services;
  /** The private redis-server's own socket (a test's side door, past any forwarder); "" on a cluster. */
  redisSocket: string;
  redisForwarder?: Forwarder;
  pgForwarder?: Forwarder;
  /** Where its Redis and Postgres listen (for a child process, e.g. `bun src/main.ts admin …`). */
  connections: Connections;
  standin: Standin;
  /** The Anthropic stand-in behind the "claude/…" models. */
  anthropic: AnthropicStandin;
  handle(req: Request): Promise<Response>;
  /** A fetch that reaches the in-process app (for x402 client libraries). */
  fetch: typeof fetch;
  /** JSON request against the app; returns status, parsed body and headers. */
  call(
    method: string,
    path: string,
    body?: unknown,
    headers?: Record<string, string>,
  ): Promise<{ status: number; body: any; headers: Headers }>;
  /** The official SDK, pointed at the in-process app. */
  openai(apiKey: string): OpenAI;
  siweMessage(account: PrivateKeyAccount, over?: Partial<Parameters<typeof createSiweMessage>[0]>): string;
  signIn(
    account: PrivateKeyAccount,
    over?: Partial<Parameters<typeof createSiweMessage>[0]>,
  ): Promise<{ message: string; signature: string }>;
  /** A fresh wallet with an API key and `usd` of granted credit. */
  /** `account`: this one instead of a fresh one (a wallet chosen for its shard, say). */
  newWallet(
    usd?: number,
    keyOptions?: Record<string, unknown>,
    account?: PrivateKeyAccount,
  ): Promise<{ account: PrivateKeyAccount; wallet: string; key: string; keyId: number }>;
  grant(wallet: string, micro: number): Promise<void>;
  ledgerState(wallet: string): Promise<{ balance: number; locked: number }>;
  /** Environment for a second gateway process on the same Redis (started with `redisPort`), database and catalog. */
  sharedEnv(): Record<string, string>;
  close(): Promise<void>;
}

/**
 * The gateway a test file shares: started before its first test (PGlite takes a few seconds to start on a busy
 * machine, hence the room), closed after its last. The returned object reads through to that gateway, so tests
 * use it as they would the gateway itself.
 */
export function sharedGateway(env: Record<string, string> = {}, opts: GatewayOptions = {}): TestGateway {
  let gw: TestGateway | undefined;
  beforeAll(async () => {
    gw = await startGateway(env, opts);
  }, 60_000);
  afterAll(async () => {
    await gw?.close();
  }, 30_000);
  return new Proxy({} as TestGateway, {
    get(_, prop) {
      if (!gw) throw new Error("the test file's gateway is used before its beforeAll started it");
      return Reflect.get(gw, prop);
    },
  });
}

/** Builds the real gateway (private redis-server, fresh database, stand-in provider) for one test file. */
export async function startGateway(env: Record<string, string> = {}, opts: GatewayOptions = {}): Promise<TestGateway> {
  setLogLevel("error");
  const standin = startStandin();
  const anthropic = startAnthropicStandin();
  const dir = mkdtempSync(join(tmpdir(), "gw-cfg-"));
  writeFileSync(join(dir, "models.json"), JSON.stringify(catalog(standin.url, anthropic.url)));
  const configEnv = {
    MODELS_FILE: join(dir, "models.json"),
    STANDIN_KEY,
    SIWE_DOMAIN,
    PUBLIC_URL: BASE,
    SIWE_CHAIN_IDS: "1,8453",
    LOG_LEVEL: "error",
    ...env,
  };
  const config = loadConfig(configEnv);
  const redis = opts.cluster ? { socket: "", stop: async () => {} } : await privateRedis({ port: opts.redisPort });
  const db = await freshDatabase();
  const redisForwarder = opts.forwardRedis ? startForwarder({ unix: redis.socket }) : undefined;
  let database = { ...db.database, debug: opts.onQuery && ((_c: number, q: string) => opts.onQuery!(q)) };
  let pgForwarder: Forwarder | undefined;
  if (opts.forwardPostgres) {
    if (database.path) {
      pgForwarder = startForwarder({ unix: database.path });
      database = { ...database, path: (pgForwarder.address as { unix: string }).unix };
    } else {
      const url = new URL(database.url);
      pgForwarder = startForwarder({ hostname: url.hostname, port: Number(url.port || 5432) });
      url.hostname = "127.0.0.1";
      url.port = String((pgForwarder.address as { port: number }).port);
      database = { ...database, url: url.toString() };
    }
  }
  const clusterTarget = opts.cluster && { cluster: opts.cluster.nodes.map((n) => ({ host: "127.0.0.1", port: n.port })) };
  const redisTarget = clusterTarget ?? (redisForwarder ? (redisForwarder.address as { unix: string }).unix : redis.socket);
  const services = await buildServices(config, { redis: redisTarget, database });
  const app = createApp(services);
  const handle = (req: Request) => app.handle(req);

  const gw: TestGateway = {
    services,
    redisSocket: redis.socket,
    redisForwarder,
    pgForwarder,
    connections: { redis: clusterTarget ?? redis.socket, database: db.database },
    standin,
    anthropic,
    handle,
    fetch: ((url: string | URL | Request, init?: RequestInit) => handle(new Request(url, init))) as typeof fetch,
    async call(method, path, body, headers = {}) {
      const res = await handle(
        new Request(BASE + path, {
          method,
          headers: { "content-type": "application/json", ...headers },
          body: body === undefined ? undefined : JSON.stringify(body),
        }),
      );
      const text = await res.text();
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // not JSON: keep the text
      }
      return { status: res.status, body: parsed, headers: res.headers };
    },
    openai(apiKey) {
      return new OpenAI({
        apiKey,
        baseURL: `${BASE}/v1`,
        maxRetries: 0,
        fetch: ((url: string | URL | Request, init?: RequestInit) => handle(new Request(url, init))) as typeof fetch,
      });
    },
    siweMessage(account, over = {}) {
      return createSiweMessage({
        domain: SIWE_DOMAIN,
        address: account.address,
        uri: BASE,
        version: "1",
        chainId: 1,
        nonce: generateSiweNonce(),
        issuedAt: new Date(),
        statement: "Sign in to the gateway",
        ...over,
      });
    },
    async signIn(account, over) {
      const message = gw.siweMessage(account, over);
      return { message, signature: await account.signMessage({ message }) };
    },
    async newWallet(usd = 10, keyOptions = {}, account = privateKeyToAccount(generatePrivateKey())) {
      const wallet = account.address.toLowerCase();
      const res = await gw.call("POST", "/v1/auth/keys", { ...(await gw.signIn(account)), label: "test", ...keyOptions });
      if (res.status !== 201) throw new Error(`key creation failed: ${res.status} ${JSON.stringify(res.body)}`);
      if (usd > 0) await gw.grant(wallet, usd * 1_000_000);
      return { account, wallet, key: res.body.key, keyId: res.body.id };
    },
    async grant(wallet, micro) {
      await services.credits.add({ eventId: `grant:${crypto.randomUUID()}`, wallet, kind: "grant", amountUsdc: micro, reason: "test" });
    },
    ledgerState: (wallet) => services.ledger.reads.balance(wallet),
    sharedEnv() {
      // An in-memory PGlite is reached through a socket path its url cannot carry: a child given the url alone
      // would connect to the machine's own Postgres instead and fail there in confusing ways.
      if (db.database.path)
        throw new Error("a child gateway shares the database only with TEST_DATABASE_URL set (scripts/test.sh sets it)");
      if (opts.cluster) return { ...configEnv, REDIS_CLUSTER_NODES: opts.cluster.seeds, DATABASE_URL: db.database.url };
      if (!opts.redisPort) throw new Error("start the gateway with a redisPort to share its Redis");
      return { ...configEnv, REDIS_URL: `redis://127.0.0.1:${opts.redisPort}`, DATABASE_URL: db.database.url };
    },
    async close() {
      await redisForwarder?.up();
      await pgForwarder?.up();
      await services.close();
      await redisForwarder?.stop();
      await pgForwarder?.stop();
      await redis.stop();
      await db.stop();
      standin.stop();
      anthropic.stop();
    },
  };
  return gw;
}

/** The exact charge at the test catalog's prices (2.5 and 10 USD per 1M tokens). */
export function expectedCharge(promptTokens: number, completionTokens: number): number {
  return Math.ceil((promptTokens * 2_500_000 + completionTokens * 10_000_000) / 1_000_000);
}
