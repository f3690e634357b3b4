/**
 * The composition root: the one place that builds everything (connections, ledger, store, services) and the
 * background work. It sits above the routes' floors; what it builds is typed by modules/services.ts, which the
 * routes import, so no module imports from here.
 */
import { ApiKeyAuth } from "./auth/apiKeys.ts";
import { SiweVerifier } from "./auth/siwe.ts";
import type { Config } from "./config.ts";
import { RedisNames } from "./ledger/names.ts";
import { Ledger } from "./ledger/ledger.ts";
import { LedgerScripts } from "./ledger/scripts.ts";
import { openRedis, type RedisCommands } from "./redis/connect.ts";
import type { RedisTarget } from "./redis/target.ts";
import { ClusterRouter } from "./redis/clusterRouter.ts";
import { log } from "./log.ts";
import { RecentCharges } from "./billing/recentCharges.ts";
import { Holds } from "./billing/holds.ts";
import { LEASE_DEFAULTS, Leases } from "./billing/leases.ts";
import { ChatService } from "./modules/chat/chat.service.ts";
import { Forwarder } from "./modules/chat/forward.ts";
import { KeyService } from "./modules/keys/keys.service.ts";
import { ProviderReachability } from "./modules/models/reachability.ts";
import { ConversationStore } from "./modules/responses/conversations.ts";
import { ResponsesService } from "./modules/responses/responses.service.ts";
import { TopupService } from "./modules/topup/topup.service.ts";
import { PaidCalls } from "./modules/paycall/paycall.service.ts";
import { KeylessCalls } from "./modules/paycall/keyless.ts";
import { UptoCalls } from "./modules/paycall/upto.ts";
import { SiwxVerifier } from "./auth/siwx.ts";
import { WalletKeys } from "./auth/walletKeys.ts";
import { UsageService } from "./modules/usage/usage.service.ts";
import { Credits } from "./store/credits.ts";
import { openDatabase } from "./store/db.ts";
import { Flusher } from "./store/flusher.ts";
import { PendingSettles } from "./store/pendingSettles.ts";
import { migrate } from "./store/migrate.ts";
import { PgHealth } from "./store/pgHealth.ts";
import { withDeadline } from "./deadline.ts";
import { DependencyDown, outageOf } from "./outage.ts";
import { reconcileFromPostgres } from "./rebuild/reconcile.ts";
import { ensureLedger } from "./rebuild/rebuild.ts";
import { checkRedisForLedger } from "./rebuild/redisChecks.ts";

import type { Services } from "./modules/services.ts";

export type { Services };

/** Where the services connect: a Redis URL or unix socket (or a Redis Cluster), and a Postgres URL (with socket path for PGlite). */
export interface Connections {
  redis: RedisTarget;
  database: { url: string; path?: string; max?: number; debug?: (connection: number, query: string) => void };
}

const SWEEP_INTERVAL_MS = 5_000;
// A dependency that does not answer at start stops the process with one line instead of waiting forever (Bun's
// Redis client queues commands while it reconnects, without end).
const STARTUP_DEADLINE_MS = 5_000;
// Money-in repairs (credits half applied, payments whose settlement was not confirmed) also run under constant
// load, when the flusher never has an idle round.
const REPAIR_INTERVAL_MS = 30_000;
// While Postgres is down, its probe (PgHealth) gives up on a connect after this long and tries again, so a host
// that did not answer is seen back within about this long.
const PROBE_CONNECT_TIMEOUT_S = 1;

/**
 * What the process built for runs of the background work (workers.ts): "all" (tests, admin commands: whoever calls
 * startBackground), "serving" (a serving process whose background process repairs and flushes: it skips the
 * start-up repairs), "background" (no provider probes).
 */
export type ServicesRole = "all" | "serving" | "background";

/** Options of buildServices beyond the connections. */
export interface BuildOptions {
  role?: ServicesRole;
  /** The flusher's consumer name in the outbox's group (default: host and process id). */
  flusherConsumer?: string;
}

/** Connects, migrates, makes sure Redis holds the ledger, and wires the services. Serves nothing yet. */
export async function buildServices(config: Config, conn: Connections, opts: BuildOptions = {}): Promise<Services> {
  const role = opts.role ?? "all";
  const rawSql = openDatabase(conn.database.url, { max: conn.database.max, path: conn.database.path, debug: conn.database.debug });
  const pgHealth = new PgHealth(rawSql, () =>
    openDatabase(conn.database.url, { max: 1, path: conn.database.path, connectTimeoutS: PROBE_CONNECT_TIMEOUT_S }),
  );
  const sql = pgHealth.guard();
  const { commands: redis, router } = openRedis(conn.redis);
  const redisNames = new RedisNames(config.ledgerShards);
  const closeClients = async () => (redis.disconnect(), router.close(), await rawSql.end({ timeout: 1 }));
  // Refusals (an evicting Redis, another LEDGER_SHARDS) come before anything is written anywhere.
  await startupStep("Redis", closeClients, () => checkRedisForLedger(redis, redisNames));
  await startupStep("Postgres", closeClients, () => migrate(rawSql));
  const scripts = await startupStep("Redis", closeClients, () => LedgerScripts.connect(router));
  const ledger = new Ledger(redis, scripts, redisNames, config);
  // A shard found without its fence (Redis lost its data) or left closed by a dead rebuilder is rebuilt, by whichever
  // process meets it first (the rebuild lock admits one): a serving process too, since only the background process's
  // flusher would notice a loss that left the outbox streams in place (its sweeper meets a fence only with expired
  // holds to release), and the requests of a lost shard wait for the rebuild whichever process runs it.
  ledger.fence.onLost(() => ensureLedger(ledger, sql));
  await ensureLedger(ledger, sql);
  await ledger.fence.readAll();

  const apiKeyAuth = new ApiKeyAuth(sql, ledger);
  const credits = new Credits(sql, ledger);
  if (role !== "serving") await credits.reapplyPending();
  const flusher = new Flusher(
    scripts.client,
    sql,
    redisNames,
    { onRedisLost: () => ensureLedger(ledger, sql), beforeDrain: () => ledger.flushQueued() },
    opts.flusherConsumer,
  );
  await flusher.init();

  const pendingSettles = new PendingSettles(sql, ledger);
  // One Holds for every endpoint that bills a model call: its settles in flight are what shutdown waits for.
  const leases = config.creditLeases
    ? new Leases(ledger, { ...LEASE_DEFAULTS, ttlMs: config.leaseTtlMs, rateLimitWindowMs: config.rateLimitWindowMs })
    : undefined;
  const recentCharges = router instanceof ClusterRouter ? new RecentCharges(router, pendingSettles) : undefined;
  const holds = new Holds(ledger, pendingSettles, leases, recentCharges);
  const chat = new ChatService(
    apiKeyAuth,
    config.catalog,
    holds,
    new Forwarder(holds, ledger, config.upstreamTimeoutMs, config.streamMaxMs),
  );
  const reachability = new ProviderReachability(config.catalog, config.providerProbeIntervalMs);
  let sweeper: ReturnType<typeof setInterval> | undefined;
  let repairer: ReturnType<typeof setInterval> | undefined;
  const topup = await TopupService.open(config.payments, sql, credits);
  const keys = new KeyService(sql, ledger, credits, apiKeyAuth, leases, config.maxKeysPerWallet);
  const siwe = new SiweVerifier(redis, redisNames, { domains: config.siweDomains, chainIds: config.siweChainIds });
  const walletKeys = new WalletKeys(sql, ledger);
  const upto = new UptoCalls(sql, credits, ledger, topup, walletKeys);
  let closing: Promise<void> | undefined;
  // Each repair job runs on its own: a slow chain RPC must not hold back deferred charges, nor one job's error
  // skip the others.
  const jobs: [string, () => Promise<unknown>][] = [
    ["credits", () => credits.reapplyPending()],
    ["payment checks", () => topup.recovery.checkPending()],
    ["deferred settles", () => pendingSettles.replay()],
    // x402 `upto` settlements a request could not finish (chain down, process killed): made now, once.
    ["upto settlements", () => upto.recover()],
    // Revocations and applied credits a Redis lost with its recent writes come back from Postgres.
    ["reconcile", () => reconcileFromPostgres(ledger, sql)],
  ];
  const running = new Map<string, Promise<unknown>>();
  const runJobs = () =>
    Promise.all(
      jobs.map(([name, job]) => {
        let run = running.get(name);
        if (!run) {
          run = job()
            .catch((e) => log.error("repair job failed; it will retry", { job: name, error: e }))
            .finally(() => running.delete(name));
          running.set(name, run);
        }
        return run;
      }),
    );
  return {
    config,
    redis,
    scripts,
    sql,
    pgHealth,
    ledger,
    leases,
    apiKeyAuth,
    siwe,
    credits,
    keys,
    usage: new UsageService(ledger, keys, sql),
    topup,
    paidCalls: new PaidCalls(config.payments, topup, ledger, apiKeyAuth, config.publicUrl),
    keyless: new KeylessCalls(
      topup,
      walletKeys,
      // SIWx signs for the payment network's chain (its 402 says so), whatever SIWE_CHAIN_IDS allow for key sign-ins.
      new SiwxVerifier(
        new SiweVerifier(redis, redisNames, { domains: config.siweDomains, chainIds: [config.payments.chain.chainId] }),
        redis,
        redisNames,
        config.payments.chain.chainId,
      ),
      upto,
      config.publicUrl,
    ),
    chat,
    reachability,
    responses: new ResponsesService(
      chat,
      apiKeyAuth,
      new ConversationStore(
        router,
        redisNames,
        {
          ttlS: config.responsesStoreTtlS,
          itemBytes: config.responsesStoreItemBytes,
          conversationBytes: config.responsesStoreConversationBytes,
          walletBytes: config.responsesStoreWalletBytes,
          walletResponses: config.responsesStoreWalletResponses,
        },
        ledger,
      ),
    ),
    pendingSettles,
    flusher,
    startBackground() {
      flusher.start();
      // Per serving process (start() is idempotent): each answers GET /v1/models from its own view; the background
      // process answers nothing.
      if (role !== "background") reachability.start();
      sweeper = setInterval(() => {
        // Redis failing over or down is an outage the next round outlives (the holds wait, they do not move): a
        // warning; anything else is a defect.
        ledger
          .sweepExpired()
          .catch((e) =>
            outageOf(e) ? log.warn("hold sweep postponed: Redis unavailable", { error: e }) : log.error("hold sweep failed", { error: e }),
          );
      }, SWEEP_INTERVAL_MS);
      repairer = setInterval(() => {
        void runJobs();
      }, REPAIR_INTERVAL_MS);
    },
    async repairNow() {
      await runJobs();
    },
    close() {
      // Twice is once: a test or a signal may close what shutdown is already closing.
      return (closing ??= closeOnce());
    },
  };

  async function closeOnce(): Promise<void> {
    pgHealth.stop();
    reachability.stop();
    clearInterval(sweeper);
    clearInterval(repairer);
    await chat.idle();
    // Leases go back once their requests are settled (a killed process's expire instead).
    await leases?.closeAll();
    await flusher.stop().catch((e) => log.error("final outbox drain failed; entries stay in Redis", { error: e }));
    redis.disconnect();
    scripts.close();
    // What is left are repair jobs, which are idempotent and may be cut short. postgres.js' end waits out its whole
    // timeout for a connection Postgres dropped (it keeps the failed query), so a long grace only held shutdown.
    await rawSql.end({ timeout: 1 });
  }
}

/**
 * One start-up step against a dependency, bounded: on failure or silence the clients opened so far are closed, and
 * an outage comes out as DependencyDown naming the dependency in one line (main prints it and exits non-zero).
 */
async function startupStep<T>(name: "Postgres" | "Redis", cleanup: () => unknown, step: () => Promise<T>): Promise<T> {
  const dependency = name === "Redis" ? "redis" : "postgres";
  const p = step();
  try {
    return await withDeadline(
      STARTUP_DEADLINE_MS,
      () => p,
      () => DependencyDown.late(dependency, name, STARTUP_DEADLINE_MS),
    );
  } catch (e) {
    p.catch(() => {});
    await Promise.resolve(cleanup()).catch(() => {});
    if (e instanceof DependencyDown || !outageOf(e)) throw e;
    throw new DependencyDown(dependency, `${name} is unreachable: ${e instanceof Error ? e.message : String(e)}`);
  }
}
