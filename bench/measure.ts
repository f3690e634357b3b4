/**
 * What the benchmark measures: latency at concurrency 1 (a sequential fetch loop), throughput at concurrency N
 * (autocannon in its own process) with the CPU time of every process involved, memory, and Redis's own counters.
 * Each function measures; none starts or stops a process.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Redis } from "ioredis";
import { ROOT, sleep } from "./settings.ts";

/** One thing to measure: the stand-in directly, the baseline proxy in front of it, or the gateway. */
export interface Target {
  name: "direct" | "baseline" | "gateway";
  url: string;
  headers: Record<string, string>;
  body: string;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

/** Latency figures of one target at concurrency 1, ms. */
export interface LatencyStats {
  n: number;
  failures: number;
  p50: number;
  p90: number;
  p99: number;
  mean: number;
  min: number;
  max: number;
}

function stats(samples: number[], failures: number): LatencyStats {
  const s = [...samples].sort((a, b) => a - b);
  return {
    n: s.length,
    failures,
    p50: percentile(s, 50),
    p90: percentile(s, 90),
    p99: percentile(s, 99),
    mean: s.reduce((a, b) => a + b, 0) / s.length,
    min: s[0] ?? NaN,
    max: s[s.length - 1] ?? NaN,
  };
}

async function once(t: Target): Promise<{ ms: number; ok: boolean }> {
  const t0 = performance.now();
  const res = await fetch(t.url, { method: "POST", headers: t.headers, body: t.body });
  await res.arrayBuffer();
  return { ms: performance.now() - t0, ok: res.status === 200 };
}

/**
 * Concurrency 1: one request at a time, rotating over the targets (direct, baseline, gateway, then the next
 * order), so drift and noise on the shared machine hit every target alike. Bounded by `n` per target.
 */
export async function sequentialLatency(
  targets: Target[],
  warmup: number,
  n: number,
): Promise<{ stats: Record<string, LatencyStats>; warmOk: Record<string, number> }> {
  const warmOk: Record<string, number> = {};
  for (let i = 0; i < warmup; i++) for (const t of targets) if ((await once(t)).ok) warmOk[t.name] = (warmOk[t.name] ?? 0) + 1;
  const samples: Record<string, number[]> = {};
  const failures: Record<string, number> = {};
  for (const t of targets) ((samples[t.name] = []), (failures[t.name] = 0));
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < targets.length; j++) {
      const t = targets[(i + j) % targets.length]!;
      const r = await once(t);
      samples[t.name]!.push(r.ms);
      if (!r.ok) failures[t.name]!++;
    }
  }
  const out: Record<string, LatencyStats> = {};
  for (const t of targets) out[t.name] = stats(samples[t.name]!, failures[t.name]!);
  return { stats: out, warmOk };
}

/** One autocannon run: throughput, answers by kind, and the CPU the processes involved used. */
export interface LoadResult {
  /**
   * CPU cores used during the run (CPU seconds / wall seconds) by the process under test, the stand-in, Redis,
   * every Postgres process of the machine, the load generator, and the whole machine (busy time of /proc/stat).
   */
  cores: { target: number; standin: number; redis: number; postgres: number; loadgen: number; machine: number };
  /** Busy CPU time of the whole machine per answered request, µs: what one request costs all processes together. */
  machineUsPerRequest: number;
  /** CPU time of the process under test per answered request, µs. */
  cpuUsPerRequest: number;
  servingUsPerRequest: number;
  /** CPU time of redis-server per answered request, µs (the gateway's ledger calls and its flusher). */
  redisUsPerRequest: number;
  /** The ledger scripts' time inside Redis per answered request, µs (INFO commandstats around a gateway run). */
  scriptUsPerRequest?: number;
  rps: number;
  total: number;
  ok2xx: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  latencyP50: number;
  latencyP99: number;
  durationS: number;
}

const CLK_TCK = Number(Bun.spawnSync(["getconf", "CLK_TCK"]).stdout.toString().trim()) || 100;

/**
 * CPU seconds a process and its descendants have used so far (all threads), from /proc/<pid>/stat: the gateway's
 * tree is its serving process, its background process (flusher, sweeper, repairs; issue 31) and any workers.
 */
export function cpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return NaN;
  let sum = statCpuSeconds(`/proc/${pid}/stat`);
  for (const child of descendants(pid)) sum += statCpuSeconds(`/proc/${child}/stat`) || 0;
  return sum;
}

/** Every process below `pid` (from each process's parent in /proc/<pid>/stat). */
export function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const list = children.get(ppid);
      if (list) list.push(Number(entry));
      else children.set(ppid, [Number(entry)]);
    } catch {
      // gone meanwhile
    }
  }
  const out: number[] = [];
  for (let todo = [pid]; todo.length > 0;) {
    const next = children.get(todo.pop()!) ?? [];
    out.push(...next);
    todo.push(...next);
  }
  return out;
}

/** CPU seconds of a process's main thread alone (its JS thread under Bun; GC and JIT helpers run beside it). */
export function jsThreadCpuSeconds(pid: number | undefined): number {
  return statCpuSeconds(pid === undefined ? undefined : `/proc/${pid}/task/${pid}/stat`);
}

function statCpuSeconds(path: string | undefined): number {
  if (path === undefined) return NaN;
  try {
    const stat = readFileSync(path, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) / CLK_TCK; // utime, stime (fields 14 and 15)
  } catch {
    return NaN;
  }
}

// Postgres processes that work for the bench: the backends of its gw_bench_* database and the server's writers.
// Other jobs' databases on the same server (tests running meanwhile) are not counted.
const OUR_POSTGRES = /postgres: .*(gw_bench_|checkpointer|background writer|walwriter)/;

/** CPU seconds used so far by each Postgres process working for the bench, by pid. */
function postgresCpuSeconds(): Map<string, number> {
  const out = new Map<string, number>();
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      if (!stat.includes("(postgres)") || !OUR_POSTGRES.test(readFileSync(`/proc/${pid}/cmdline`, "utf8"))) continue;
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      out.set(pid, (Number(f[11]) + Number(f[12])) / CLK_TCK);
    } catch {
      // the process ended meanwhile
    }
  }
  return out;
}

/** CPU seconds the processes of `after` used since `before` (one that started meanwhile: all of it). */
function postgresDelta(before: Map<string, number>, after: Map<string, number>): number {
  let total = 0;
  for (const [pid, s] of after) total += s - (before.get(pid) ?? 0);
  return total;
}

/** Busy CPU seconds of the whole machine so far (all cores; everything but idle and iowait), from /proc/stat. */
function machineBusySeconds(): number {
  const f = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = f;
  return (user + nice + system + irq + softirq + steal) / CLK_TCK;
}

/** Processes whose CPU time is sampled around each load run. */
export interface Watch {
  target: number;
  standin: number;
  redis: number;
}

/**
 * Concurrency N for a fixed duration with autocannon in its own process (so it never shares our event loop),
 * run by `loadgen` (node, or bun); at most `rate` requests per second when given.
 */
export async function autocannon(
  loadgen: string[],
  t: Target,
  connections: number,
  durationS: number,
  watch: Watch,
  /** Requests per second over all connections (autocannon -R); none: as many as the target answers. */
  rate?: number,
): Promise<LoadResult> {
  const args = [
    ...loadgen,
    join(ROOT, "node_modules", "autocannon", "autocannon.js"),
    "-j",
    "-n",
    "-c",
    String(connections),
    "-d",
    String(durationS),
    "-t",
    "10",
    ...(rate ? ["-R", String(rate)] : []),
    "-m",
    "POST",
    ...Object.entries(t.headers).flatMap(([k, v]) => ["-H", `${k}=${v}`]),
    "-b",
    t.body,
    t.url,
  ];
  const cpu0 = {
    serving: watch.target === undefined ? NaN : statCpuSeconds(`/proc/${watch.target}/stat`),
    target: cpuSeconds(watch.target),
    standin: cpuSeconds(watch.standin),
    redis: cpuSeconds(watch.redis),
    postgres: postgresCpuSeconds(),
    machine: machineBusySeconds(),
  };
  const wall0 = performance.now();
  const p = Bun.spawn(args, { cwd: ROOT, stdout: "pipe", stderr: "pipe", stdin: "ignore" });
  const killer = setTimeout(() => p.kill("SIGKILL"), (durationS + 60) * 1000);
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  clearTimeout(killer);
  const cpu1 = {
    serving: watch.target === undefined ? NaN : statCpuSeconds(`/proc/${watch.target}/stat`),
    target: cpuSeconds(watch.target),
    standin: cpuSeconds(watch.standin),
    redis: cpuSeconds(watch.redis),
    postgres: postgresCpuSeconds(),
    machine: machineBusySeconds(),
  };
  const wallS = (performance.now() - wall0) / 1000;
  const loadgenCpuS = Number(p.resourceUsage()?.cpuTime.total ?? NaN) / 1e6;
  const line = out.trim().split("\n").pop() ?? "";
  if (code !== 0 || !line.startsWith("{")) throw new Error(`autocannon failed (${code}): ${err.slice(0, 2000) || out.slice(0, 2000)}`);
  const r = JSON.parse(line) as {
    requests: { average: number; total: number };
    latency: { p50: number; p99: number };
    "2xx": number;
    non2xx: number;
    errors: number;
    timeouts: number;
    duration: number;
  };
  // The servers only work while the load runs: divide by autocannon's own duration (the load generator's
  // start-up is outside it); the load generator's CPU is divided by its whole lifetime.
  const loadS = r.duration || wallS;
  const cores = {
    target: (cpu1.target - cpu0.target) / loadS,
    standin: (cpu1.standin - cpu0.standin) / loadS,
    redis: (cpu1.redis - cpu0.redis) / loadS,
    postgres: postgresDelta(cpu0.postgres, cpu1.postgres) / wallS,
    loadgen: loadgenCpuS / wallS,
    machine: (cpu1.machine - cpu0.machine) / wallS,
  };
  return {
    cores,
    machineUsPerRequest: ((cpu1.machine - cpu0.machine) / Math.max(1, r["2xx"])) * 1e6,
    // The target's whole CPU delta: it only works while the load runs. (Taken as cores × wall time it was inflated
    // by the load generator's start-up, wall ÷ load time: 3–8 % that moved from run to run.)
    cpuUsPerRequest: ((cpu1.target - cpu0.target) / Math.max(1, r["2xx"])) * 1e6,
    // The target's own process alone (for the gateway: the serving process, without its background process).
    servingUsPerRequest: ((cpu1.serving - cpu0.serving) / Math.max(1, r["2xx"])) * 1e6,
    redisUsPerRequest: ((cpu1.redis - cpu0.redis) / Math.max(1, r["2xx"])) * 1e6,
    rps: r.requests.average,
    total: r.requests.total,
    ok2xx: r["2xx"],
    non2xx: r.non2xx,
    errors: r.errors,
    timeouts: r.timeouts,
    latencyP50: r.latency.p50,
    latencyP99: r.latency.p99,
    durationS: r.duration,
  };
}

/** Share of the machine's CPU that was busy over `ms` (from /proc/stat), before the bench starts anything. */
export async function machineBusy(ms = 1_000): Promise<number> {
  const sample = () => {
    const f = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
    const idle = (f[3] ?? 0) + (f[4] ?? 0);
    return { idle, total: f.reduce((a, b) => a + b, 0) };
  };
  try {
    const a = sample();
    await sleep(ms);
    const b = sample();
    return 1 - (b.idle - a.idle) / Math.max(1, b.total - a.total);
  } catch {
    return NaN;
  }
}

/** Resident and peak memory of a process, KiB. */
export function rssKb(pid: number): { rssKb: number; hwmKb: number } {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN);
    return { rssKb: field("VmRSS"), hwmKb: field("VmHWM") };
  } catch {
    return { rssKb: NaN, hwmKb: NaN };
  }
}

/** One request that must answer 200 with choices before anything is measured. */
export async function checkAnswer(t: Target): Promise<void> {
  const res = await fetch(t.url, { method: "POST", headers: t.headers, body: t.body });
  const text = await res.text();
  let ok = res.status === 200;
  try {
    ok &&= Array.isArray((JSON.parse(text) as { choices?: unknown }).choices);
  } catch {
    ok = false;
  }
  if (!ok) throw new Error(`sanity request to ${t.name} (${t.url}) failed: ${res.status} ${text.slice(0, 300)}`);
}

/** Script calls and the µs they ran inside Redis between two `redisCommandStats` readings. */
export function scriptDelta(
  before: Record<string, { calls: number; usec: number }>,
  after: typeof before,
): { calls: number; usec: number } {
  const sum = (st: typeof before, k: "calls" | "usec") => (st.evalsha?.[k] ?? 0) + (st.eval?.[k] ?? 0);
  return { calls: sum(after, "calls") - sum(before, "calls"), usec: sum(after, "usec") - sum(before, "usec") };
}

/** Redis `INFO commandstats` as { command: { calls, usec } }. */
export async function redisCommandStats(url: string): Promise<Record<string, { calls: number; usec: number }>> {
  const r = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  r.on("error", () => {});
  try {
    await r.connect();
    const text = await r.info("commandstats");
    const out: Record<string, { calls: number; usec: number }> = {};
    for (const m of text.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) out[m[1]!] = { calls: Number(m[2]), usec: Number(m[3]) };
    return out;
  } catch {
    return {};
  } finally {
    r.disconnect();
  }
}
