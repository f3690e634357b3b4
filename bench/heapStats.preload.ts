/**
 * Preloaded into the gateway by `BENCH_MEMORY_LAUNCH=stats bun bench/memory.ts` (a diagnostic, never in the figures):
 * on SIGUSR2 it writes JavaScriptCore's heap figures, Bun's memory figures and the modules loaded so far to
 * $BENCH_HEAP_FILE, so the runner can say where the gateway's memory is.
 */
import { renameSync, writeFileSync } from "node:fs";
import { heapStats, memoryUsage } from "bun:jsc";

const file = process.env.BENCH_HEAP_FILE;
if (file) {
  process.on("SIGUSR2", () => {
    const h = heapStats();
    const top = Object.entries(h.objectTypeCounts)
      .sort((a, b) => b[1] - a[1])
      .slice(0, 25);
    const modules = Object.keys(require.cache);
    const out = {
      heapSize: h.heapSize,
      heapCapacity: h.heapCapacity,
      extraMemorySize: h.extraMemorySize,
      objectCount: h.objectCount,
      protectedObjectCount: h.protectedObjectCount,
      top,
      jsc: memoryUsage(),
      process: process.memoryUsage(),
      modules: modules.length,
      moduleList: modules,
    };
    if (process.env.BENCH_MIMALLOC_DUMP) Bun.unsafe.mimallocDump();
    const rssBefore = process.memoryUsage.rss();
    const t0 = performance.now();
    Bun.gc(true);
    const gcMs = performance.now() - t0;
    const after = heapStats();
    Object.assign(out, {
      gcMs,
      rssBefore,
      rssAfterGc: process.memoryUsage.rss(),
      heapAfterGc: after.heapSize,
      capacityAfterGc: after.heapCapacity,
      extraAfterGc: after.extraMemorySize,
      topAfterGc: Object.entries(after.objectTypeCounts)
        .sort((a, b) => b[1] - a[1])
        .slice(0, 25),
    });
    writeFileSync(`${file}.tmp`, JSON.stringify(out));
    renameSync(`${file}.tmp`, file);
  });
}
