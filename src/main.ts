import { AdminUsageError, runAdmin } from "./admin.ts";
import { createApp, MAX_BODY_BYTES } from "./app.ts";
import { ConfigError, loadConfig, type Config } from "./config.ts";
import { log, setLogLevel } from "./log.ts";
import { buildServices } from "./services.ts";
import { openStack } from "./stack.ts";

// Longer than a settle's retries (~1 min), shorter than a patient orchestrator's grace period.
const SHUTDOWN_DEADLINE_MS = 90_000;

async function serve(config: Config): Promise<void> {
  const stack = await openStack(config);
  let services;
  try {
    services = await buildServices(config, stack.connections);
  } catch (e) {
    // A Redis the ledger cannot trust (evicting, another shard count) stops the start with one line.
    if (e instanceof ConfigError) await stack.stop();
    throw e;
  }
  services.startBackground();
  const app = createApp(services);
  // A body without Content-Length is cut off by Bun just above the app's own limit (which answers in the spec's shape).
  const server = Bun.serve({ port: config.port, hostname: config.host, fetch: app.fetch, idleTimeout: 0, maxRequestBodySize: MAX_BODY_BYTES + 1024 * 1024 });
  log.info("gateway listening", { url: `http://${config.host}:${server.port}`, models: config.catalog.models.size });

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info("shutting down", { signal });
    // With Redis or Postgres gone, the final settles and drain could wait forever; what is left stays in the Redis
    // outbox (and pending_settles) for the next start.
    setTimeout(() => {
      log.error("shutdown did not finish in time; exiting with work left for the next start", { after_ms: SHUTDOWN_DEADLINE_MS });
      void Promise.race([services.chat.keepInFlight(), Bun.sleep(5_000)])
        .then(() => Promise.race([stack.stop(), Bun.sleep(5_000)])) // no orphaned redis-server
        .finally(() => process.exit(1));
    }, SHUTDOWN_DEADLINE_MS).unref();
    await server.stop(); // waits for in-flight requests, so their holds settle before the drain
    await services.close();
    await stack.stop();
    process.exit(0);
  };
  process.on("SIGTERM", () => void shutdown("SIGTERM"));
  process.on("SIGINT", () => void shutdown("SIGINT"));
}

async function main(argv: string[]): Promise<void> {
  let config: Config;
  try {
    config = loadConfig();
  } catch (e) {
    if (e instanceof ConfigError) {
      console.error(`configuration error: ${e.message}`);
      process.exit(1);
    }
    throw e;
  }
  setLogLevel(config.logLevel);
  const [command = "serve", ...rest] = argv;
  try {
    if (command === "serve") return await serve(config);
    if (command === "admin") {
      console.log(await runAdmin(config, rest));
      process.exit(0);
    }
  } catch (e) {
    if (e instanceof AdminUsageError) {
      console.error(e.message);
      process.exit(2);
    }
    if (e instanceof ConfigError) {
      console.error(`configuration error: ${e.message}`);
      process.exit(1);
    }
    throw e;
  }
  console.error(`unknown command "${command}": use serve or admin`);
  process.exit(2);
}

await main(process.argv.slice(2));
