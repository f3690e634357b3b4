import { withDeadline } from "../../deadline.ts";
import type { Services } from "../services.ts";

/** "up" or "down", as /health and the metrics report a dependency. */
export type DependencyState = "up" | "down";

// A probe that waits longer than this is as good as a failed one: a health check must answer while Redis hangs.
const PROBE_MS = 1_000;

function probe(check: () => Promise<unknown>): Promise<DependencyState> {
  return withDeadline(PROBE_MS, check, () => new Error("probe timed out")).then(
    () => "up" as const,
    () => "down" as const,
  );
}

/**
 * Redis (both connections: ioredis for keys and SIWE, Bun's client for the ledger scripts) and Postgres, each
 * probed once with a deadline.
 */
export async function dependencyStates(s: Services): Promise<{ redis: DependencyState; postgres: DependencyState }> {
  const [ioredis, ledger, postgres] = await Promise.all([
    probe(() => s.redis.ping()),
    probe(() => s.scripts.client.send("PING", [])),
    probe(() => s.sql`SELECT 1`),
  ]);
  return { redis: ioredis === "up" && ledger === "up" ? "up" : "down", postgres };
}
