/**
 * Preloaded into the gateway by the benchmark (`bun --preload bench/loopStall.preload.ts src/main.ts serve`), so
 * the gateway's own code carries no bench hooks: an event-loop delay monitor (node:perf_hooks, which Bun has)
 * whose histogram is written to $BENCH_LOOP_FILE and reset on SIGUSR2. The runner signals before a phase (reset)
 * and after it (read), so each phase gets its own histogram of how long the loop was late: the wait any request
 * arriving at a random moment would add.
 */
import { renameSync, writeFileSync } from "node:fs";
import { monitorEventLoopDelay } from "node:perf_hooks";

const file = process.env.BENCH_LOOP_FILE;
/** The histogram's bucket edges, ms (the runner's BUCKET_EDGES). */
const EDGES_MS = [0.5, 1, 2, 5, 10];
if (file) {
  const resolution = Number(process.env.BENCH_LOOP_RESOLUTION_MS || 1);
  const h = monitorEventLoopDelay({ resolution });
  h.enable();
  let seq = 0;
  let since = performance.now();
  process.on("SIGUSR2", () => {
    const now = performance.now();
    const at = (p: number) => Number(h.percentile(p)) / 1e6;
    // Share of samples (%) below each edge: the highest percentile whose delay is under it, by bisection.
    const below = EDGES_MS.map((edge) => {
      if (h.count === 0 || at(100) < edge) return 100;
      let lo = 0;
      let hi = 100;
      for (let i = 0; i < 24; i++) {
        const mid = (lo + hi) / 2;
        if (at(mid) < edge) lo = mid;
        else hi = mid;
      }
      return lo;
    });
    const out = {
      seq: ++seq,
      resolutionMs: resolution,
      windowMs: now - since,
      count: h.count,
      maxMs: h.max / 1e6,
      p50Ms: at(50),
      p90Ms: at(90),
      p99Ms: at(99),
      p999Ms: at(99.9),
      edgesMs: EDGES_MS,
      below,
    };
    writeFileSync(file + ".tmp", JSON.stringify(out));
    renameSync(file + ".tmp", file); // atomic: the runner never reads half a file
    h.reset();
    since = now;
  });
}
