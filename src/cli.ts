/**
 * The commands behind the entry (main.ts): `serve`, the gateway (alone, or as the primary or a worker of
 * WORKERS=N), and `admin`, the operator's commands; their usage texts and one-line failures.
 */
import { hostname } from "node:os";
import { AdminFailedReport, AdminFailure, AdminHelp, AdminUsageError, parseAdmin, runAdmin } from "./admin/dispatch.ts";
import { createApp } from "./app.ts";
import { ConfigError, loadConfig, type Config } from "./config.ts";
import { settingsHelp } from "./config/settings.ts";
import { ApiError, errorResponse } from "./errors.ts";
import { bufferStdout, log, logToStderr, redactText, setLogLevel, shareStdout } from "./log.ts";
import { LOCAL_MODEL_ID, startLocalModel, withLocalModel } from "./providers/localModel.ts";
import { requestWaitS, serverLimits, withRequestTimeouts } from "./requestBody.ts";
import { buildServices, type Services } from "./wiring.ts";
import { openStack, type Stack } from "./stack.ts";
import { checkDependencies, listenError, StartupError } from "./startup.ts";
import { setWorkerLabel } from "./observe/metrics.ts";
import { joinPeers, leavePeers } from "./observe/peers.ts";
import {
  announceBackground,
  announceListening,
  BackgroundFailed,
  BackgroundProcess,
  backgroundParent,
  onPrimaryGone,
  removeRoleDir,
  WorkerPool,
  workerRole,
  type WorkerRole,
} from "./workers.ts";

// Longer than a settle's retries (~1 min), shorter than a patient orchestrator's grace period.
const SHUTDOWN_DEADLINE_MS = 90_000;

const USAGE = `usage: bun src/main.ts [serve | admin <command>] [--help]   (the compiled binary: gateway …)

  serve            the gateway (the default command): HTTP on HOST:PORT (0.0.0.0:8080)
  admin <command>  operator commands (grant, balance, keys, codes, referrals); admin --help lists them

Configuration is by environment variables: serve --help lists them, docs/operating.md describes each.`;

const SERVE_USAGE = `usage: bun src/main.ts serve

  Starts the gateway on HOST:PORT (0.0.0.0:8080). Without REDIS_URL / DATABASE_URL it runs a private
  redis-server and an embedded Postgres (PGlite) keeping their data in DATA_DIR (./data).
  SIGTERM or Ctrl-C stops it gracefully.

Settings (environment variables; docs/operating.md has the table with types and ranges):
${settingsHelp()}`;

/** Which providers serve and which are off, once at start: the first thing to look at when a model is missing. */
function logProviders(config: Config): void {
  const { providers, models } = config.catalog;
  const on = providers.filter((p) => p.state !== "off").map((p) => (p.state === "keyless" ? `${p.name} (keyless)` : p.name));
  const off = providers.filter((p) => p.state === "off").map((p) => `${p.name} (${p.apiKeyEnv} unset)`);
  log.info("providers", { on, off, models: models.size, catalog: config.modelsFile });
  if (config.localModel) {
    const keys = providers.flatMap((p) => (p.state === "off" && p.apiKeyEnv ? [p.apiKeyEnv] : []));
    log.warn(
      `no provider is configured: serving ${LOCAL_MODEL_ID}, a local test model in this process that echoes your last message; set a provider's API key variable (${keys.join(", ")}) or MODELS_FILE to serve real models instead`,
    );
  } else if (models.size === 0) {
    log.warn(
      "no model is served: set a provider's API key variable, or MODELS_FILE=config/models.local.json for a local model server (README)",
    );
  }
}

async function serve(config: Config): Promise<void> {
  bufferStdout(); // one access-log line per request: written in batches, not one write each
  const role = workerRole(config);
  if (role.kind === "background") return runBackground(config, role);
  // Workers share the port with the primary (the kernel spreads connections over them).
  const options = { port: config.port, hostname: config.host, reusePort: role.kind !== "single", ...serverLimits(config.idleTimeoutS) };
  // Listen first: a port in use is one line before anything is started (no redis-server child left behind).
  // Until the services are up, requests get 503. A worker (the port is known to be free for it) listens only once
  // it can serve: a replacement started under load would otherwise take connections from the running ones only to
  // answer them 503.
  const starting = () => errorResponse(new ApiError({ code: "SERVICE_UNAVAILABLE", message: "The gateway is starting" }));
  let server: ReturnType<typeof Bun.serve> | undefined;
  if (role.kind !== "worker") {
    try {
      server = Bun.serve({ ...options, fetch: starting });
    } catch (e) {
      throw listenError(e, config);
    }
  }
  // Each process (a worker too) answers its own chats: the echo server is in-process, on a loopback port.
  const localModel = config.localModel ? startLocalModel() : undefined;
  if (localModel) config = { ...config, catalog: withLocalModel(config.catalog, localModel.url) };
  if (role.kind !== "worker") {
    logProviders(config);
    // Said once, where it matters: a serving gateway answers POST /v1/topup 503. Admin commands build the same
    // services and have nothing to do with top-ups, so they stay quiet about it (and so do a primary's workers).
    if (!config.payments.enabled) log.warn("top-ups are disabled: set PAY_TO, a facilitator and (on a local chain) ASSETS_FILE");
  }
  let stack: Stack | undefined;
  let services: Services;
  let pool: WorkerPool | undefined;
  let background: BackgroundProcess | undefined;
  try {
    // The background process opens the embedded redis-server and Postgres (PGlite) in DATA_DIR, or checks the
    // external ones, and makes sure Redis holds the ledger; every serving process then joins them.
    if (role.kind !== "worker") {
      background = new BackgroundProcess(role.dir);
      await background.start();
    }
    stack = await openStack(config);
    await checkDependencies(stack.connections);
    services = await buildServices(config, stack.connections, { role: "serving" });
    shareStdout();
    setWorkerLabel(role.kind === "worker" ? role.index : 0);
    joinPeers(role.dir, role.kind === "worker" ? role.index : 0);
    if (role.kind === "primary") {
      pool = new WorkerPool(role, server!.port!);
      await pool.start();
    }
  } catch (e) {
    void server?.stop(true);
    await pool?.stop();
    await stack?.stop();
    await background?.stop(); // never leave the embedded redis-server behind
    await localModel?.stop();
    removeRoleDir(role);
    if (e instanceof BackgroundFailed) throw new StartupError(e.message);
    throw e;
  }
  // The flusher, the sweeper and the repair jobs run in the background process; every serving process keeps its
  // own view of which keyless providers answer (GET /v1/models).
  services.reachability.start();
  const app = createApp(services);
  const fetch = withRequestTimeouts(app.fetch, requestWaitS(config));
  if (server) server.reload({ ...options, fetch });
  else server = Bun.serve({ ...options, fetch });
  const listening = server;
  if (role.kind === "worker") {
    log.info("worker listening", { worker: role.index, pid: process.pid });
    announceListening();
  } else {
    const workers = role.kind === "primary" ? role.count : 1;
    log.info("gateway listening", { url: `http://${config.host}:${listening.port}`, models: config.catalog.models.size, workers });
  }

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info("shutting down", { signal, ...(role.kind === "worker" ? { worker: role.index } : {}) });
    // With Redis or Postgres gone, the final settles and drain could wait forever; what is left stays in the Redis
    // outbox (and pending_settles) for the next start.
    setTimeout(() => {
      log.error("shutdown did not finish in time; exiting with work left for the next start", { after_ms: SHUTDOWN_DEADLINE_MS });
      void Promise.race([services.chat.keepInFlight(), Bun.sleep(5_000)])
        .then(() => Promise.race([stack!.stop().then(() => background?.stop()), Bun.sleep(5_000)])) // no orphaned redis-server
        .finally(() => process.exit(1));
    }, SHUTDOWN_DEADLINE_MS).unref();
    // The workers finish their requests while this process finishes its own; the drain comes after both.
    await Promise.all([pool?.stop(), listening.stop()]); // server.stop waits for in-flight requests, so their holds settle
    leavePeers();
    await services.close();
    await stack!.stop();
    // Last: the background process drains the outbox into Postgres, then stops the embedded services.
    await background?.stop();
    removeRoleDir(role);
    process.exit(0);
  };
  process.on("SIGTERM", () => void shutdown("SIGTERM"));
  process.on("SIGINT", () => void shutdown("SIGINT"));
  if (role.kind === "worker") onPrimaryGone(() => void shutdown("primary gone"));
}

/**
 * The background process (workers.ts): the embedded services, the flusher, the sweeper, the rebuild and the repair
 * jobs; no HTTP. It stops when its primary asks (IPC) or is gone (even killed with -9: the IPC channel closes),
 * draining the outbox first. It ignores SIGINT and SIGTERM: a Ctrl-C or a service manager signals every process
 * of the group at once, and the embedded services must outlive the serving processes' last settles.
 */
async function runBackground(config: Config, role: Extract<WorkerRole, { kind: "background" }>): Promise<void> {
  let stack: Stack | undefined;
  let services: Services;
  try {
    stack = await openStack(config);
    await checkDependencies(stack.connections);
    services = await buildServices(config, stack.connections, {
      role: "background",
      flusherConsumer: `${hostname()}-${backgroundParent()}-background`,
    });
  } catch (e) {
    await stack?.stop();
    const line = oneLine(e);
    if (!process.send) exit(1, line);
    process.send({ failed: line }, undefined, undefined, () => process.exit(1));
    return;
  }
  shareStdout();
  setWorkerLabel("background");
  joinPeers(role.dir, "background");
  services.startBackground();
  let stopping = false;
  const shutdown = async (why: string) => {
    if (stopping) return;
    stopping = true;
    log.info("background process stopping", { why });
    setTimeout(() => {
      log.error("the background process did not stop in time; the outbox keeps what is left for the next start", {
        after_ms: SHUTDOWN_DEADLINE_MS,
      });
      void Promise.race([stack!.stop(), Bun.sleep(5_000)]).finally(() => process.exit(1));
    }, SHUTDOWN_DEADLINE_MS).unref();
    leavePeers();
    await services.close();
    await stack!.stop();
    process.exit(0);
  };
  process.on("SIGTERM", () => {});
  process.on("SIGINT", () => {});
  process.on("message", (m: { stop?: boolean }) => {
    if (m?.stop) void shutdown("asked");
  });
  onPrimaryGone(() => void shutdown("primary gone"));
  announceBackground({ ready: true });
}

/** What an operator reads when a command fails: one line, never a stack trace or a secret. */
function oneLine(e: unknown): string {
  // A Redis the ledger cannot trust (it may evict keys, or another LEDGER_SHARDS) is a configuration problem.
  if (e instanceof ConfigError) return `configuration error: ${e.message}`;
  if (e instanceof StartupError || e instanceof AdminFailure || e instanceof ApiError) return e.message;
  const message = e instanceof Error ? e.message : String(e);
  return `error: ${redactText(message).split("\n")[0]!.slice(0, 300)}`;
}

function exit(code: number, text: string): never {
  (code === 0 ? process.stdout : process.stderr).write(text + "\n");
  process.exit(code);
}

async function main(argv: string[]): Promise<void> {
  const [command = "serve", ...rest] = argv;
  const wantsHelp = rest.includes("--help") || rest.includes("-h");
  if (command === "--help" || command === "-h" || command === "help") exit(0, USAGE);
  if (command === "serve" && wantsHelp) exit(0, SERVE_USAGE);
  if (command === "serve" && rest.length > 0) exit(2, `serve takes no arguments (configuration is by environment)\n\n${SERVE_USAGE}`);
  if (command !== "serve" && command !== "admin") exit(2, `unknown command "${command}"\n\n${USAGE}`);
  if (command === "admin") {
    // Arguments (and --help) are settled before the configuration is read or anything is opened.
    try {
      parseAdmin(rest);
    } catch (e) {
      if (e instanceof AdminHelp) exit(0, e.message);
      if (e instanceof AdminUsageError) exit(2, e.message);
      throw e;
    }
  }

  let config: Config;
  try {
    config = loadConfig();
  } catch (e) {
    if (e instanceof ConfigError) exit(1, `configuration error: ${e.message}`);
    throw e;
  }
  setLogLevel(config.logLevel);
  try {
    if (command === "serve") return await serve(config);
    // The answer alone on stdout; logs on stderr, and only warnings unless LOG_LEVEL asks for more.
    logToStderr();
    if (!process.env.LOG_LEVEL) setLogLevel("warn");
    exit(0, await runAdmin(config, rest, (line) => process.stderr.write(line + "\n")));
  } catch (e) {
    if (e instanceof AdminUsageError) exit(2, e.message);
    if (e instanceof AdminFailedReport) {
      process.stdout.write(e.report + "\n");
      process.exit(1);
    }
    exit(1, oneLine(e));
  }
}

await main(process.argv.slice(2));
