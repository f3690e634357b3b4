import type { Services } from "../services.ts";
import { log } from "../../log.ts";
import { holdOverruns } from "../../billing/overruns.ts";
import { dependencyStates } from "../health/dependencies.ts";
import { metrics } from "../../observe/metrics.ts";

/**
 * Reads the gauges that live outside this process, once per scrape and at bounded cost: per ledger shard one
 * ZCARD, one XLEN and one XRANGE … COUNT 1 (sent together), and two counts in Postgres on small tables. A
 * dependency that is down leaves its gauges as they were and reports itself down.
 */
export async function scrapeLive(s: Services): Promise<void> {
  syncOverruns();
  const deps = await dependencyStates(s);
  metrics.redisUp.set(deps.redis === "up" ? 1 : 0);
  metrics.postgresUp.set(deps.postgres === "up" ? 1 : 0);
  const failed = (what: string) => (e: unknown) => log.warn(`metrics scrape of ${what} failed`, { error: e });
  await Promise.all([
    deps.redis === "up" && scrapeRedis(s).catch(failed("Redis")),
    deps.postgres === "up" && scrapePostgres(s).catch(failed("Postgres")),
  ]);
}

async function scrapeRedis(s: Services): Promise<void> {
  const redisNames = s.ledger.names;
  const shards = redisNames.allShards();
  const client = s.scripts.client;
  const [time, holds, lengths, oldest] = await Promise.all([
    client.send("TIME", []) as Promise<[string, string]>,
    Promise.all(shards.map((sh) => client.send("ZCARD", [redisNames.holds(sh)], redisNames.holds(sh)) as Promise<number>)),
    Promise.all(shards.map((sh) => client.send("XLEN", [redisNames.outbox(sh)], redisNames.outbox(sh)) as Promise<number>)),
    Promise.all(
      shards.map(
        (sh) =>
          client.send("XRANGE", [redisNames.outbox(sh), "-", "+", "COUNT", "1"], redisNames.outbox(sh)) as Promise<[string, unknown][]>,
      ),
    ),
  ]);
  const nowMs = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
  metrics.ledgerHolds.set(holds.reduce((a, n) => a + Number(n), 0));
  metrics.outboxEntries.set(lengths.reduce((a, n) => a + Number(n), 0));
  // A stream entry id starts with Redis's clock in ms when it was added: the oldest one tells how far behind Postgres is.
  let oldestMs = nowMs;
  for (const entries of oldest) {
    const id = entries?.[0]?.[0];
    if (id) oldestMs = Math.min(oldestMs, Number(id.split("-")[0]));
  }
  metrics.outboxLag.set(Math.max(0, nowMs - oldestMs) / 1000);
}

async function scrapePostgres(s: Services): Promise<void> {
  const [row] = await s.sql<{ settles: number; checks: number }[]>`
    SELECT (SELECT count(*)::int FROM pending_settles) AS settles,
           (SELECT count(*)::int FROM payment_checks WHERE state = 'pending') AS checks`;
  metrics.pendingSettles.set(row?.settles ?? 0);
  metrics.paymentChecks.set(row?.checks ?? 0);
}

// The chat service counts overruns in its own module; the counters take what was added since the last scrape.
const seen = { count: 0, excessMicro: 0 };
function syncOverruns(): void {
  const now = holdOverruns();
  if (now.count > seen.count) metrics.settlesAboveHold.inc(now.count - seen.count);
  if (now.excessMicro > seen.excessMicro) metrics.settlesAboveHoldUsdc.inc(now.excessMicro - seen.excessMicro);
  Object.assign(seen, now);
}
