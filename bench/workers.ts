/**
 * Every core: `bun bench/workers.ts`. The same set-up as run.ts (stand-ins, a private Redis, a fresh database,
 * the single-process gateway and its one-process baseline proxy), plus a gateway with WORKERS=2 on the same Redis
 * and database and two baseline proxies sharing one port (reusePort). Then JSON at concurrency 32 against the 0 ms
 * stand-in, the targets alternating per round, and one table: each gateway's req/s beside the baseline of as
 * many processes, their ratio, and the memory each worker adds. run.ts runs the two-process half of it
 * (`workersPhase`) after its own phases, for its second table.
 *
 * BENCH_DURATION_S (default 6) and BENCH_ROUNDS (default 2) size the runs.
 */
import { autocannon, type Target, type Watch } from "./measure.ts";
import { type Setup, setUp, targetsFor } from "./phases.ts";
import { openWorkDir, runThenClean, startBaselineGroup, startGateway, stopChild } from "./processes.ts";
import { f0, f2 } from "./report.ts";
import { log } from "./settings.ts";

const DURATION_S = Number(process.env.BENCH_DURATION_S || 6);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 2);
const CONNECTIONS = 32;

/** Resident MiB of each process of a gateway, from its own /metrics (one series per worker). */
async function workerRss(base: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^gateway_process_resident_memory_bytes\{worker="(\d+)"\} (\d+)/gm)) out[m[1]!] = Number(m[2]) / 2 ** 20;
  return out;
}

/** What workersPhase measured: req/s per target, and the RSS of each worker of each gateway. */
export interface WorkersFigures {
  rps: Record<string, number>;
  rss: Record<string, Record<string, number>>;
  table: string[];
}

/**
 * WORKERS=2 beside two plain proxies sharing one port, alternating rounds of JSON at concurrency 32; with `single`,
 * the set-up's one-process gateway and proxy too. Stops what it started.
 */
export async function workersPhase(s: Setup, loadgen: string[], single: boolean): Promise<WorkersFigures> {
  const u0 = s.upstreams[0]!;
  const gw2 = await startGateway(s.upstreams, s.redis.url, s.db, "gateway-workers2", { WORKERS: "2" });
  const pair = await startBaselineGroup(u0.standinPort, 2);
  try {
    const one = targetsFor(s, 0);
    const targets: Record<string, Target> = {
      ...(single ? { "gateway ×1": one.gateway, "baseline ×1": one.baseline } : {}),
      "gateway ×2": { ...one.gateway, url: `${gw2.base}/v1/chat/completions` },
      "baseline ×2": { ...one.baseline, url: `http://127.0.0.1:${pair.port}/v1/chat/completions` },
    };
    // A gateway's CPU is its process tree's (every worker and the background process); a proxy group's its first's.
    const pids: Record<string, number | undefined> = {
      "gateway ×1": s.gw.child.proc.pid,
      "baseline ×1": u0.baseline.proc.pid,
      "gateway ×2": gw2.child.proc.pid,
      "baseline ×2": pair.children[0]?.proc.pid,
    };
    const watchOf = (name: string): Watch => ({ target: pids[name] ?? 0, standin: u0.standin.proc.pid, redis: s.redis.pid });
    for (const [name, t] of Object.entries(targets)) await autocannon(loadgen, t, CONNECTIONS, 2, watchOf(name)); // warm-up
    const rps: Record<string, number> = {};
    const redisUs: Record<string, number> = {};
    const cpuUs: Record<string, number> = {};
    const names = Object.keys(targets);
    for (let round = 0; round < ROUNDS; round++) {
      for (const name of round % 2 ? [...names].reverse() : names) {
        const r = await autocannon(loadgen, targets[name]!, CONNECTIONS, DURATION_S, watchOf(name));
        rps[name] = (rps[name] ?? 0) + r.rps / ROUNDS;
        redisUs[name] = (redisUs[name] ?? 0) + r.redisUsPerRequest / ROUNDS;
        cpuUs[name] = (cpuUs[name] ?? 0) + r.cpuUsPerRequest / ROUNDS;
        log(
          `${name} c${CONNECTIONS} round ${round + 1}: ${f0(r.rps)} req/s · non-2xx ${r.non2xx + r.errors} · machine ${f2(r.cores.machine)} cores`,
        );
      }
    }
    const rss: Record<string, Record<string, number>> = { "×2": await workerRss(gw2.base) };
    if (single) rss["×1"] = await workerRss(s.gw.base);
    const table = [
      `| processes | gateway req/s | per process | plain proxy req/s | ratio (target ≥ 0.50) | gateway CPU µs/request (tree) | Redis CPU µs/request | gateway RSS per process after the load |`,
      `|---:|---:|---:|---:|---:|---:|---:|---|`,
    ];
    const row = (n: number) =>
      `| ${n} | ${f0(rps[`gateway ×${n}`]!)} | ${f0(rps[`gateway ×${n}`]! / n)} | ${f0(rps[`baseline ×${n}`]!)} | ${f2(rps[`gateway ×${n}`]! / rps[`baseline ×${n}`]!)} | ` +
      `${f0(cpuUs[`gateway ×${n}`]!)} | ${f0(redisUs[`gateway ×${n}`]!)} |`;
    if (single) table.push(`${row(1)} ${Object.values(rss["×1"]!).map(f0).join(" MiB, ")} MiB |`);
    table.push(
      `${row(2)} ${Object.entries(rss["×2"]!)
        .map(([w, m]) => `worker ${w}: ${f0(m)} MiB`)
        .join(", ")} |`,
    );
    return { rps, rss, table };
  } finally {
    await stopChild(gw2.child);
    for (const c of pair.children) await stopChild(c);
  }
}

async function main(): Promise<void> {
  openWorkDir(); // catalog, data and logs of the processes it starts go there, not into the checkout
  const s = await setUp();
  const node = Bun.which("node");
  const { table } = await workersPhase(s, node ? [node] : [process.execPath], true);
  process.stdout.write(
    `\nJSON at concurrency ${CONNECTIONS}, 0 ms stand-in, ${ROUNDS} × ${DURATION_S} s per target\n\n${table.join("\n")}\n`,
  );
}

if (import.meta.main) await runThenClean(main);
