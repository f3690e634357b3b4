/** The benchmark's report: the markdown table printed and written to bench/results/latest.md. */
import type { LatencyStats, LoadResult, rssKb } from "./measure.ts";
import { S, TARGETS } from "./settings.ts";

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

/** The run as markdown: header, latency and throughput tables, memory, ledger check, targets and verdict. */
export function report(meta: Record<string, unknown>, results: DelayResult[], rss: RssFigures, valid: boolean): string {
  const L: string[] = [];
  L.push(`# Gateway benchmark — ${meta.date}`);
  L.push("");
  L.push(
    `bun ${meta.bun} · ${meta.cpus} CPU (${meta.cpuModel}) · CPU busy before start ${meta.cpuBusyBeforePct}% · loadavg before ${meta.loadavgBefore}, after ${meta.loadavgAfter} · load generator: autocannon 9 on ${meta.loadgen} · ` +
      `Redis: private redis-server (TCP) · Postgres: ${meta.postgres} · commit ${meta.commit}`,
  );
  L.push("");
  L.push(`## Added latency at concurrency 1 (sequential, ${S.latN} req/target at 0 ms, ${S.latNSlow} at 20 ms, interleaved; ms)`);
  L.push("");
  L.push("| stand-in delay | direct p50 | direct p99 | gateway p50 | gateway p99 | **added p50** | **added p99** | baseline added p50 | baseline added p99 | failures |");
  L.push("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (const r of results) {
    const d = r.latency.direct!, g = r.latency.gateway!;
    const fails = Object.values(r.latency).reduce((a, s) => a + s.failures, 0);
    L.push(
      `| ${r.delayMs} ms | ${f3(d.p50)} | ${f3(d.p99)} | ${f3(g.p50)} | ${f3(g.p99)} | **${f3(r.addedP50Ms)}** | **${f3(r.addedP99Ms)}** | ${f3(r.baselineAddedP50Ms)} | ${f3(r.baselineAddedP99Ms)} | ${fails} |`,
    );
  }
  L.push("");
  L.push(`## Throughput at concurrency ${S.connections} (autocannon, ${S.durationS} s × ${S.rounds} round(s) each after ${S.warmupS} s warm-up; req/s)`);
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
  if (meta.ledgerCheck) L.push("", `Ledger: ${meta.ledgerCheck}`);
  if (meta.redisPerCharge) L.push("", String(meta.redisPerCharge));
  L.push("");
  L.push("## Targets");
  L.push("");
  L.push("| target | 0 ms | 20 ms |");
  L.push("|---|---:|---:|");
  const by = (d: number) => results.find((r) => r.delayMs === d);
  const row = (label: string, pick: (r: DelayResult) => string, ok: (r: DelayResult) => boolean) =>
    L.push(`| ${label} | ${[0, 20].map((d) => { const r = by(d); return r ? `${pick(r)} ${verdict(ok(r))}` : "n/a"; }).join(" | ")} |`);
  row(`throughput ratio ≥ ${TARGETS.ratio}`, (r) => f2(r.ratio), (r) => r.ratio >= TARGETS.ratio);
  row(`added p50 ≤ ${TARGETS.addedP50Ms} ms`, (r) => f3(r.addedP50Ms), (r) => r.addedP50Ms <= TARGETS.addedP50Ms);
  row(`added p99 ≤ ${TARGETS.addedP99Ms} ms`, (r) => f3(r.addedP99Ms), (r) => r.addedP99Ms <= TARGETS.addedP99Ms);
  L.push("");
  L.push(valid ? "Run valid: every measured request answered 2xx." : "**Run INVALID: some requests failed (see failures / non-2xx columns).**");
  return L.join("\n") + "\n";
}
