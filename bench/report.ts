/** The benchmark's report: the markdown table printed and written to bench/results/latest.md. */
import { BUCKET_LABELS, type LoopStall } from "./loopStall.ts";
import type { LatencyStats, LoadResult, rssKb } from "./measure.ts";
import { ISSUE14, S, TARGETS } from "./settings.ts";
import type { StreamStats, WrkResult } from "./tail.ts";

type Memory = ReturnType<typeof rssKb>;

/** Everything measured against the stand-in of one answer delay. */
export interface DelayResult {
  delayMs: number;
  latency: Record<string, LatencyStats>;
  addedP50Ms: number;
  addedP99Ms: number;
  baselineAddedP50Ms: number;
  baselineAddedP99Ms: number;
  throughput: { gateway: LoadResult[]; baseline: LoadResult[]; direct: LoadResult[] };
  gatewayRps: number;
  baselineRps: number;
  directRps: number;
  ratio: number;
  non2xx: number;
  /** The gateway's event-loop delay per phase at this delay (fetch loop, each concurrency-N round). */
  stalls: LoopStall[];
}

/** wrk at concurrency 1 on one persistent connection (0 ms stand-in): runs per target, added = mean − direct. */
export interface WrkFigures {
  runs: Record<string, WrkResult[]>;
  addedP50Ms: number;
  addedP99Ms: number;
  addedP999Ms: number;
  baselineAddedP50Ms: number;
  baselineAddedP99Ms: number;
  baselineAddedP999Ms: number;
  failures: number;
  stall: LoopStall | undefined;
  /** The 0 ms baseline proxy's loop delay over the same phase. */
  baselineStall: LoopStall | undefined;
}

/** Streamed answers (0 ms stand-in): first byte at concurrency 1, streams per second at concurrency N. */
export interface StreamResult {
  ttfb: Record<string, StreamStats>;
  addedTtfbP50Ms: number;
  addedTtfbP99Ms: number;
  baselineAddedTtfbP50Ms: number;
  baselineAddedTtfbP99Ms: number;
  /** Streams per second by stand-in delay. */
  rates: Record<number, StreamRate>;
  failures: number;
  stalls: LoopStall[];
}

/** Streams per second at concurrency N against one stand-in. */
export interface StreamRate {
  runs: { gateway: LoadResult[]; baseline: LoadResult[] };
  gatewayRps: number;
  baselineRps: number;
  ratio: number;
  failures: number;
}

export const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : "n/a");
export const f3 = (x: number) => (Number.isFinite(x) ? x.toFixed(3) : "n/a");
export const f0 = (x: number) => (Number.isFinite(x) ? Math.round(x).toLocaleString("en-US") : "n/a");
export const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const verdict = (ok: boolean) => (ok ? "PASS" : "FAIL");

/** Memory of the gateway (idle after warm-up, after the load) and of the 0 ms baseline proxy after the load. */
export interface RssFigures {
  idle: Memory;
  after: Memory;
  baselineAfter: Memory;
}

const mib = (kb: number) => kb / 1024;

/** Issue 14's table: each figure of this run beside the baseline's, the issue's "now" and its target. */
function issueTable(
  L: string[],
  meta: Record<string, unknown>,
  results: DelayResult[],
  rss: RssFigures,
  w: WrkFigures | undefined,
  st: StreamResult,
): void {
  const r0 = results.find((r) => r.delayMs === 0)!;
  const gw0 = r0.throughput.gateway;
  const redisProc = mean(gw0.map((x) => x.redisUsPerRequest));
  const scriptsC32 = mean(gw0.map((x) => x.scriptUsPerRequest ?? NaN));
  const scriptUs = Number(meta.redisScriptUsPerCharge);
  const rows: [string, string, string, string, string][] = [
    [
      `throughput, gateway / plain Bun proxy, ${S.connections} connections`,
      `**${f2(r0.ratio)}** (${f0(r0.gatewayRps)} req/s)`,
      `${f0(r0.baselineRps)} req/s`,
      ISSUE14.ratio.now,
      `≥ ${ISSUE14.ratio.target.toFixed(2)} ${verdict(r0.ratio >= ISSUE14.ratio.target)}`,
    ],
    [
      "added p99 at concurrency 1, persistent connection (wrk)",
      w ? `**${f3(w.addedP99Ms)} ms** (p50 ${f3(w.addedP50Ms)}, p99.9 ${f3(w.addedP999Ms)})` : "n/a (no wrk)",
      w ? `${f3(w.baselineAddedP99Ms)} ms (p50 ${f3(w.baselineAddedP50Ms)}, p99.9 ${f3(w.baselineAddedP999Ms)})` : "n/a",
      ISSUE14.wrkAddedP99Ms.now,
      w ? `≤ ${ISSUE14.wrkAddedP99Ms.target} ms ${verdict(w.addedP99Ms <= ISSUE14.wrkAddedP99Ms.target)}` : "n/a",
    ],
    [
      "added p99 at concurrency 1, sequential fetch loop",
      `**${f3(r0.addedP99Ms)} ms** (p50 ${f3(r0.addedP50Ms)})`,
      `${f3(r0.baselineAddedP99Ms)} ms (p50 ${f3(r0.baselineAddedP50Ms)})`,
      ISSUE14.fetchAddedP99Ms.now,
      `≤ ${ISSUE14.fetchAddedP99Ms.target} ms ${verdict(r0.addedP99Ms <= ISSUE14.fetchAddedP99Ms.target)}`,
    ],
    [
      "stream: added time to first byte, p50 / p99",
      `**${f3(st.addedTtfbP50Ms)} / ${f3(st.addedTtfbP99Ms)} ms**`,
      `${f3(st.baselineAddedTtfbP50Ms)} / ${f3(st.baselineAddedTtfbP99Ms)} ms`,
      `${ISSUE14.streamTtfbAddedP50Ms.now} / ${ISSUE14.streamTtfbAddedP99Ms.now}`,
      `≤ ${ISSUE14.streamTtfbAddedP50Ms.target} / ≤ ${ISSUE14.streamTtfbAddedP99Ms.target} ms ${verdict(st.addedTtfbP50Ms <= ISSUE14.streamTtfbAddedP50Ms.target && st.addedTtfbP99Ms <= ISSUE14.streamTtfbAddedP99Ms.target)}`,
    ],
    ...Object.entries(st.rates).map(([d, x]): [string, string, string, string, string] => [
      `stream: streams per second, gateway / plain proxy, ${S.connections} connections, **${d} ms** stand-in`,
      `**${f2(x.ratio)}** (${f0(x.gatewayRps)} streams/s)`,
      `${f0(x.baselineRps)} streams/s`,
      ISSUE14.streamRatio.now,
      `≥ ${ISSUE14.streamRatio.target} ${verdict(x.ratio >= ISSUE14.streamRatio.target)}`,
    ]),
    [
      "gateway RSS after the load / peak",
      `**${f0(mib(rss.after.rssKb))} / ${f0(mib(rss.after.hwmKb))} MiB**`,
      `${f0(mib(rss.baselineAfter.rssKb))} / ${f0(mib(rss.baselineAfter.hwmKb))} MiB`,
      `${ISSUE14.rssAfterMiB.now} / ${ISSUE14.rssPeakMiB.now}`,
      `≤ ${ISSUE14.rssAfterMiB.target} / ≤ ${ISSUE14.rssPeakMiB.target} MiB ${verdict(mib(rss.after.rssKb) <= ISSUE14.rssAfterMiB.target && mib(rss.after.hwmKb) <= ISSUE14.rssPeakMiB.target)}`,
    ],
    [
      "Redis CPU per charged request (scripts' time in Redis, commandstats): whole run · JSON c32 runs",
      `**${Number.isFinite(scriptUs) ? scriptUs.toFixed(1) : "n/a"} µs · ${Number.isFinite(scriptsC32) ? scriptsC32.toFixed(1) : "n/a"} µs** (redis-server process: ${f0(redisProc)} µs/request at c${S.connections})`,
      "— (no Redis)",
      ISSUE14.redisUsPerCharge.now,
      `≤ ${ISSUE14.redisUsPerCharge.target} µs ${verdict(scriptUs <= ISSUE14.redisUsPerCharge.target)}`,
    ],
  ];
  L.push("## Issue 23's figures (0 ms stand-in; the rows issue 23 does not name keep issue 14's targets)");
  L.push("");
  L.push('| figure | gateway (this run) | baseline proxy (this run) | issue\'s "now" | target |');
  L.push("|---|---:|---:|---:|---:|");
  for (const row of rows) L.push(`| ${row.join(" | ")} |`);
  L.push("");
}

/** The gateway's event-loop delay per phase: percentiles and the share of samples per bucket. */
function stallTable(L: string[], stalls: LoopStall[]): void {
  L.push(`## Gateway event-loop delay per phase (monitorEventLoopDelay, ${S.loopResolutionMs} ms resolution; ms, share of samples in %)`);
  L.push("");
  L.push(`| phase | samples | p50 | p90 | p99 | p99.9 | max | ${BUCKET_LABELS.map((b) => `${b} ms`).join(" | ")} |`);
  L.push(`|---|---:|---:|---:|---:|---:|---:|${BUCKET_LABELS.map(() => "---:").join("|")}|`);
  for (const x of stalls) {
    L.push(
      `| ${x.phase} | ${f0(x.samples)} | ${f2(x.p50Ms)} | ${f2(x.p90Ms)} | ${f2(x.p99Ms)} | ${f2(x.p999Ms)} | ${f2(x.maxMs)} | ${BUCKET_LABELS.map((b) => (x.buckets[b] ?? 0).toFixed(2)).join(" | ")} |`,
    );
  }
  L.push("");
}

/** The run as markdown: header, issue 14's figures, latency, wrk, streams, throughput, loop delay, memory, checks. */
export function report(
  meta: Record<string, unknown>,
  results: DelayResult[],
  rss: RssFigures,
  valid: boolean,
  w: WrkFigures | undefined,
  st: StreamResult,
): string {
  const L: string[] = [];
  L.push(`# Gateway benchmark — ${meta.date}`);
  L.push("");
  L.push(
    `bun ${meta.bun} · ${meta.cpus} CPU (${meta.cpuModel}) · CPU busy before start ${meta.cpuBusyBeforePct}% · loadavg before ${meta.loadavgBefore}, after ${meta.loadavgAfter} · load generator: autocannon 9 on ${meta.loadgen} · ` +
      `Redis: private redis-server (TCP) · Postgres: ${meta.postgres} · gateway LOG_LEVEL=${meta.gatewayLogLevel} CREDIT_LEASES=${meta.creditLeases} · commit ${meta.commit}`,
  );
  L.push("");
  issueTable(L, meta, results, rss, w, st);
  L.push(`## Added latency at concurrency 1 (sequential, ${S.latN} req/target at 0 ms, ${S.latNSlow} at 20 ms, interleaved; ms)`);
  L.push("");
  L.push(
    "| stand-in delay | direct p50 | direct p99 | gateway p50 | gateway p99 | **added p50** | **added p99** | baseline added p50 | baseline added p99 | failures |",
  );
  L.push("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (const r of results) {
    const d = r.latency.direct!,
      g = r.latency.gateway!;
    const fails = Object.values(r.latency).reduce((a, s) => a + s.failures, 0);
    L.push(
      `| ${r.delayMs} ms | ${f3(d.p50)} | ${f3(d.p99)} | ${f3(g.p50)} | ${f3(g.p99)} | **${f3(r.addedP50Ms)}** | **${f3(r.addedP99Ms)}** | ${f3(r.baselineAddedP50Ms)} | ${f3(r.baselineAddedP99Ms)} | ${fails} |`,
    );
  }
  L.push("");
  if (w) {
    L.push(
      `## Concurrency 1 on one persistent connection (wrk, 0 ms stand-in, ${S.wrkRounds} round(s) × ${S.wrkS} s per target, rotating; ms, mean over rounds)`,
    );
    L.push("");
    L.push("| target | req/s | p50 | p90 | p99 | p99.9 | max | failures |");
    L.push("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (const [name, runs] of Object.entries(w.runs)) {
      const m = (pick: (r: WrkResult) => number) => mean(runs.map(pick));
      L.push(
        `| ${name} | ${f0(m((r) => r.rps))} | ${f3(m((r) => r.p50Ms))} | ${f3(m((r) => r.p90Ms))} | ${f3(m((r) => r.p99Ms))} | ${f3(m((r) => r.p999Ms))} | ${f2(Math.max(...runs.map((r) => r.maxMs)))} | ${runs.reduce((a, r) => a + r.failures, 0)} |`,
      );
    }
    L.push("");
  }
  L.push(
    `## Streamed answers: first byte at concurrency 1 (0 ms stand-in, ${S.streamN} per target, interleaved; ms), streams/s at concurrency ${S.connections}`,
  );
  L.push("");
  const rateCols = Object.keys(st.rates)
    .map((d) => `streams/s (${d} ms) | CPU µs/stream (${d} ms)`)
    .join(" | ");
  L.push(`| target | first byte p50 | p90 | p99 | whole stream p50 | p99 | ${rateCols} | failures |`);
  L.push(
    `|---|---:|---:|---:|---:|---:|${Object.keys(st.rates)
      .map(() => "---:|---:")
      .join("|")}|---:|`,
  );
  for (const [name, x] of Object.entries(st.ttfb)) {
    const cells = Object.values(st.rates).map((r) => {
      const runs = (r.runs as Record<string, LoadResult[] | undefined>)[name];
      return runs ? `${f0(mean(runs.map((q) => q.rps)))} | ${f0(mean(runs.map((q) => q.cpuUsPerRequest)))}` : "— | —";
    });
    L.push(
      `| ${name} | ${f3(x.ttfbP50)} | ${f3(x.ttfbP90)} | ${f3(x.ttfbP99)} | ${f3(x.totalP50)} | ${f3(x.totalP99)} | ${cells.join(" | ")} | ${x.failures} |`,
    );
  }
  L.push("");
  L.push(
    `## Throughput at concurrency ${S.connections} (autocannon, ${S.durationS} s × ${S.rounds} round(s) each after ${S.warmupS} s warm-up; req/s)`,
  );
  L.push("");
  L.push(
    "| stand-in delay | gateway | baseline proxy | **ratio gateway/baseline** | direct to stand-in | gateway p50 / p99 latency (ms) | CPU µs/request gateway / baseline | machine CPU µs/request gateway / baseline | cores used: gateway · stand-in · redis · postgres · autocannon (machine busy) | non-2xx + errors |",
  );
  L.push("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (const r of results) {
    const g = r.throughput.gateway;
    const b = r.throughput.baseline;
    L.push(
      `| ${r.delayMs} ms | ${f0(r.gatewayRps)} | ${f0(r.baselineRps)} | **${f2(r.ratio)}** | ${f0(r.directRps)} | ` +
        `${mean(g.map((x) => x.latencyP50)).toFixed(1)} / ${mean(g.map((x) => x.latencyP99)).toFixed(1)} | ` +
        `${f0(mean(g.map((x) => x.cpuUsPerRequest)))} / ${f0(mean(b.map((x) => x.cpuUsPerRequest)))} | ` +
        `${f0(mean(g.map((x) => x.machineUsPerRequest)))} / ${f0(mean(b.map((x) => x.machineUsPerRequest)))} | ` +
        `${f2(mean(g.map((x) => x.cores.target)))} · ${f2(mean(g.map((x) => x.cores.standin)))} · ${f2(mean(g.map((x) => x.cores.redis)))} · ` +
        `${f2(mean(g.map((x) => x.cores.postgres)))} · ${f2(mean(g.map((x) => x.cores.loadgen)))} (${f2(mean(g.map((x) => x.cores.machine)))}) | ${r.non2xx} |`,
    );
  }
  L.push("");
  L.push(
    `Gateway RSS: ${f0(rss.idle.rssKb / 1024)} MiB idle after warm-up, **${f0(rss.after.rssKb / 1024)} MiB after the run** (peak ${f0(rss.after.hwmKb / 1024)} MiB); ` +
      `baseline proxy (0 ms) after the run ${f0(rss.baselineAfter.rssKb / 1024)} MiB.`,
  );
  L.push("");
  stallTable(L, [
    ...results.flatMap((r) => r.stalls.filter((x) => x.phase.startsWith("fetch"))),
    ...(w?.stall ? [w.stall] : []),
    ...(w?.baselineStall ? [w.baselineStall] : []),
    ...st.stalls,
    ...results.flatMap((r) => r.stalls.filter((x) => !x.phase.startsWith("fetch"))),
  ]);
  if (meta.ledgerCheck) L.push(`Ledger: ${meta.ledgerCheck}`);
  if (meta.redisPerCharge) L.push("", String(meta.redisPerCharge));
  L.push("");
  L.push("## Targets");
  L.push("");
  L.push("| target | 0 ms | 20 ms |");
  L.push("|---|---:|---:|");
  const by = (d: number) => results.find((r) => r.delayMs === d);
  const row = (label: string, pick: (r: DelayResult) => string, ok: (r: DelayResult) => boolean) =>
    L.push(
      `| ${label} | ${[0, 20]
        .map((d) => {
          const r = by(d);
          return r ? `${pick(r)} ${verdict(ok(r))}` : "n/a";
        })
        .join(" | ")} |`,
    );
  row(
    `throughput ratio ≥ ${TARGETS.ratio}`,
    (r) => f2(r.ratio),
    (r) => r.ratio >= TARGETS.ratio,
  );
  row(
    `added p50 ≤ ${TARGETS.addedP50Ms} ms`,
    (r) => f3(r.addedP50Ms),
    (r) => r.addedP50Ms <= TARGETS.addedP50Ms,
  );
  row(
    `added p99 ≤ ${TARGETS.addedP99Ms} ms`,
    (r) => f3(r.addedP99Ms),
    (r) => r.addedP99Ms <= TARGETS.addedP99Ms,
  );
  L.push("");
  L.push(
    valid ? "Run valid: every measured request answered 2xx." : "**Run INVALID: some requests failed (see failures / non-2xx columns).**",
  );
  return L.join("\n") + "\n";
}
