import { mkdirSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { MetricObjectWithValues, MetricValue } from "prom-client";
import { AggregatorRegistry } from "./promClient.ts";
import { registry } from "./metrics.ts";

type Snapshot = MetricObjectWithValues<MetricValue<string>>[];

// A peer that does not answer within this is left out of one scrape (its counters come back with the next).
const PEER_DEADLINE_MS = 1_000;

let peersDir: string | undefined;
let peerServer: ReturnType<typeof Bun.serve> | undefined;
let ownSocket: string | undefined;

/**
 * With WORKERS > 1 every process serving the port publishes its registry on a unix socket in `dir`, so whichever
 * process a scrape reaches answers for all of them: one /metrics for the whole gateway, counters summed.
 */
export function joinPeers(dir: string, worker: number | "background"): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  peersDir = dir;
  ownSocket = join(dir, `metrics-${worker}.sock`);
  rmSync(ownSocket, { force: true }); // left by a worker killed outright, whose replacement this is
  peerServer = Bun.serve({
    unix: ownSocket,
    fetch: async () => Response.json(await registry.getMetricsAsJSON()),
  });
}

/** Stops publishing this process's registry (shutdown). */
export function leavePeers(): void {
  void peerServer?.stop(true);
  peerServer = undefined;
}

async function peerSnapshot(socket: string): Promise<Snapshot | undefined> {
  try {
    const res = await fetch("http://peer/metrics", { unix: socket, signal: AbortSignal.timeout(PEER_DEADLINE_MS) });
    return res.ok ? ((await res.json()) as Snapshot) : undefined;
  } catch {
    return undefined; // a worker restarting or stopping: its numbers are back at the next scrape
  }
}

/**
 * The Prometheus text of this process alone, or, among workers, of all of them: this process's snapshot first, so
 * a gauge read live at this scrape (aggregator "first": Redis and Postgres figures) is this scrape's value.
 */
export async function metricsText(): Promise<string> {
  if (!peersDir) return registry.metrics();
  const own = await registry.getMetricsAsJSON();
  const sockets = readdirSync(peersDir)
    .filter((f) => f.startsWith("metrics-") && f.endsWith(".sock"))
    .map((f) => join(peersDir!, f))
    .filter((s) => s !== ownSocket);
  const others = await Promise.all(sockets.map(peerSnapshot));
  return AggregatorRegistry.aggregate([own, ...others.filter((s) => s !== undefined)]).metrics();
}
