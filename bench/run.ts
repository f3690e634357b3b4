/**
 * Load benchmark: one command (`bun bench/run.ts`, or `bun run bench`) that starts, all on 127.0.0.1,
 *   · two provider stand-ins (answer delay 0 ms and 20 ms), each in its own process,
 *   · a private redis-server and a fresh Postgres database (PGlite when Postgres is not reachable),
 *   · the gateway (`bun src/main.ts serve`) with a catalog pointing at both stand-ins,
 *   · a plain Bun pass-through proxy per stand-in as the baseline,
 * then measures, for each delay,
 *   · latency at concurrency 1 (sequential fetch loop, interleaved direct / baseline / gateway) → added p50/p99,
 *   · throughput at concurrency 32 (autocannon) for the gateway and the baseline → their ratio,
 * and the gateway's RSS after the run. It prints a markdown table and writes bench/results/.
 * Every loop is bounded by count or duration, a watchdog ends the run, and everything it started is stopped
 * (and the temporary database dropped) on the way out, also on error or Ctrl-C.
 *
 * Knobs (environment): BENCH_QUICK=1 (smoke run), BENCH_DURATION_S, BENCH_WARMUP_S, BENCH_ROUNDS,
 * BENCH_CONNECTIONS, BENCH_LAT_N (per target, 0 ms stand-in), BENCH_LAT_N_SLOW (20 ms stand-in),
 * BENCH_LOADGEN=node|bun (runtime for autocannon; default node when installed), BENCH_PG_URL.
 */
import { closeSync, copyFileSync, existsSync, readdirSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Subprocess } from "bun";
import { Redis } from "ioredis";
import postgres from "postgres";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { createSiweMessage, generateSiweNonce } from "viem/siwe";

// ───────────────────────────── settings ─────────────────────────────

const ROOT = resolve(import.meta.dir, "..");
const RESULTS = join(ROOT, "bench", "results");
const QUICK = process.env.BENCH_QUICK === "1";
/** BENCH_PROFILE=1: run the gateway under Bun's CPU profiler; the profile lands in bench/results/profile-*. */
const PROFILE = process.env.BENCH_PROFILE === "1";

function envInt(name: string, fallback: number, min: number, max: number): number {
  const raw = process.env[name];
  if (!raw) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${name} must be a whole number in [${min}, ${max}]`);
  return n;
}

const S = {
  delays: [0, 20],
  connections: envInt("BENCH_CONNECTIONS", 32, 1, 1024),
  durationS: envInt("BENCH_DURATION_S", QUICK ? 3 : 10, 1, 120),
  warmupS: envInt("BENCH_WARMUP_S", QUICK ? 1 : 3, 0, 60),
  rounds: envInt("BENCH_ROUNDS", QUICK ? 1 : 2, 1, 10),
  latWarmup: QUICK ? 50 : 300,
  latN: envInt("BENCH_LAT_N", QUICK ? 300 : 3000, 10, 100_000),
  latNSlow: envInt("BENCH_LAT_N_SLOW", QUICK ? 60 : 600, 10, 10_000),
  /** Hard limit for the whole run; the watchdog cleans up and exits non-zero after it. */
  watchdogMs: 15 * 60_000,
  pgAdminUrl: process.env.BENCH_PG_URL || "postgres://postgres@127.0.0.1:5432/postgres",
  grantUsd: "1000000",
  maxTokens: 16,
};

const TARGETS = { ratio: 0.4, addedP50Ms: 0.5, addedP99Ms: 1.5 };
const STANDIN_KEY = "standin-key";
const MESSAGES = [{ role: "user", content: "Say hello to the benchmark." }];
const directBody = JSON.stringify({ model: "echo", messages: MESSAGES, max_tokens: S.maxTokens });
const gatewayBody = (delay: number) => JSON.stringify({ model: `standin${delay}/echo`, messages: MESSAGES, max_tokens: S.maxTokens });

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const log = (msg: string) => process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);

// ───────────────────────────── processes and cleanup ─────────────────────────────

interface Child {
  name: string;
  proc: Subprocess;
  logFile: string;
}

const children: Child[] = [];
const cleanups: (() => Promise<void> | void)[] = [];
let workDir = "";

function freePort(): number {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

function tail(file: string, lines = 20): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "";
  }
}

/** Spawns a child whose stderr (and, unless `pipeStdout`, stdout) goes to a log file in the work dir. */
function spawnChild(name: string, cmd: string[], opts: { env?: Record<string, string>; pipeStdout?: boolean } = {}): Child {
  const logFile = join(workDir, `${name}.log`);
  const fd = openSync(logFile, "a");
  const proc = Bun.spawn(cmd, {
    cwd: ROOT,
    env: opts.env ?? (process.env as Record<string, string>),
    stdin: "ignore",
    stdout: opts.pipeStdout ? "pipe" : fd,
    stderr: fd,
  });
  closeSync(fd);
  const child = { name, proc, logFile };
  children.push(child);
  return child;
}

/** Waits for the "READY <port>" line our bench children print. */
async function readyPort(child: Child, timeoutMs = 20_000): Promise<number> {
  const stdout = child.proc.stdout as ReadableStream<Uint8Array>;
  const reader = stdout.getReader();
  const dec = new TextDecoder();
  let buf = "";
  const deadline = Date.now() + timeoutMs;
  try {
    while (Date.now() < deadline) {
      const r = await Promise.race([reader.read(), sleep(deadline - Date.now()).then(() => null)]);
      if (r === null) break;
      if (r.done) throw new Error(`${child.name} exited before it was ready:\n${tail(child.logFile)}`);
      buf += dec.decode(r.value, { stream: true });
      const m = /READY (\d+)/.exec(buf);
      if (m) return Number(m[1]);
    }
  } finally {
    reader.releaseLock();
  }
  throw new Error(`${child.name} was not ready within ${timeoutMs} ms:\n${tail(child.logFile)}`);
}

async function stopChild(c: Child): Promise<void> {
  if (c.proc.exitCode !== null || c.proc.signalCode !== null) return;
  c.proc.kill("SIGTERM");
  const done = await Promise.race([c.proc.exited.then(() => true), sleep(15_000).then(() => false)]);
  if (!done) {
    log(`${c.name} (pid ${c.proc.pid}) ignored SIGTERM; killing it`);
    c.proc.kill("SIGKILL");
    await Promise.race([c.proc.exited, sleep(5_000)]);
  }
}

let cleaning: Promise<void> | undefined;
function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    // The gateway first (it drains its outbox into Postgres on SIGTERM), then everything else.
    const order = [...children].sort((a, b) => Number(b.name === "gateway") - Number(a.name === "gateway"));
    for (const c of order) await stopChild(c).catch((e) => log(`stopping ${c.name}: ${e}`));
    for (const f of cleanups.reverse()) await Promise.resolve(f()).catch((e) => log(`cleanup: ${e}`));
    if (workDir && !process.env.BENCH_KEEP_TMP) rmSync(workDir, { recursive: true, force: true });
  })();
  return cleaning;
}

for (const sig of ["SIGINT", "SIGTERM"] as const) {
  process.on(sig, () => {
    log(`${sig}: cleaning up`);
    void cleanup().finally(() => process.exit(130));
  });
}

// ───────────────────────────── services ─────────────────────────────

let redisPid = 0;
let redisUrlForStats = "";

/** Redis `INFO commandstats` as { command: { calls, usec } }. */
async function redisCommandStats(): Promise<Record<string, { calls: number; usec: number }>> {
  const r = new Redis(redisUrlForStats, { lazyConnect: true, maxRetriesPerRequest: 1 });
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
async function startRedis(): Promise<string> {
  const port = freePort();
  const dir = join(workDir, "redis");
  mkdirSync(dir);
  const c = spawnChild("redis", [
    "redis-server", "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
    "--dir", dir, "--daemonize", "no", "--loglevel", "warning",
  ]);
  redisPid = c.proc.pid;
  const url = `redis://127.0.0.1:${port}/0`;
  redisUrlForStats = url;
  for (let i = 0; i < 100; i++) {
    if (c.proc.exitCode !== null) throw new Error(`redis-server exited:\n${tail(c.logFile)}`);
    const r = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    r.on("error", () => {}); // refused until redis-server listens; connect() reports it
    try {
      await r.connect();
      if ((await r.ping()) === "PONG") return url;
    } catch {
      // not up yet
    } finally {
      r.disconnect();
    }
    await sleep(50);
  }
  throw new Error(`redis-server did not answer:\n${tail(c.logFile)}`);
}

/** A fresh database on the machine's Postgres, or undefined (→ the gateway's embedded PGlite). */
async function freshDatabase(): Promise<{ url: string; name: string } | undefined> {
  const admin = postgres(S.pgAdminUrl, { max: 1, connect_timeout: 3, onnotice: () => {} });
  try {
    await admin`SELECT 1`;
  } catch (e) {
    log(`Postgres at ${S.pgAdminUrl} not reachable (${(e as Error).message}); the gateway uses embedded PGlite`);
    await admin.end({ timeout: 1 }).catch(() => {});
    return undefined;
  }
  const name = `gw_bench_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`;
  await admin.unsafe(`CREATE DATABASE ${name}`);
  cleanups.push(async () => {
    await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end({ timeout: 5 });
    log(`dropped database ${name}`);
  });
  const url = new URL(S.pgAdminUrl);
  url.pathname = `/${name}`;
  return { url: url.toString(), name };
}

function catalog(standinPorts: Record<number, number>) {
  const providers: Record<string, unknown> = {};
  const models: unknown[] = [];
  for (const [delay, port] of Object.entries(standinPorts)) {
    providers[`standin${delay}`] = { type: "openai", baseUrl: `http://127.0.0.1:${port}/v1`, apiKeyEnv: "STANDIN_KEY" };
    models.push({
      id: `standin${delay}/echo`,
      provider: `standin${delay}`,
      upstreamModel: "echo",
      name: `echo (stand-in, ${delay} ms)`,
      contextLength: 128_000,
      maxOutputTokens: 4096,
      promptPricePer1MTokens: 2.5,
      completionPricePer1M: 10,
      costPromptPer1M: 2,
      costCompletionPer1M: 8,
    });
  }
  return { providers, models };
}

async function waitHealthy(gw: Child, base: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (gw.proc.exitCode !== null) throw new Error(`gateway exited with ${gw.proc.exitCode}:\n${tail(gw.logFile)}`);
    try {
      const r = await fetch(`${base}/health`, { signal: AbortSignal.timeout(2_000) });
      await r.arrayBuffer();
      if (r.status === 200) return;
    } catch {
      // not listening yet
    }
    await sleep(100);
  }
  throw new Error(`gateway not healthy within ${timeoutMs} ms:\n${tail(gw.logFile)}`);
}

/** Signs in with a fresh wallet, creates an API key, and grants the wallet credit with the admin command. */
async function apiKeyWithCredit(base: string, domain: string, env: Record<string, string>): Promise<{ key: string; wallet: string }> {
  const account = privateKeyToAccount(generatePrivateKey());
  const message = createSiweMessage({
    domain,
    address: account.address,
    uri: `http://${domain}`,
    version: "1",
    chainId: 31337,
    nonce: generateSiweNonce(),
    issuedAt: new Date(),
  });
  const signature = await account.signMessage({ message });
  const res = await fetch(`${base}/v1/auth/keys`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ message, signature, label: "bench" }),
  });
  const body = (await res.json()) as { key?: string };
  if (res.status !== 201 || !body.key) throw new Error(`key creation failed: ${res.status} ${JSON.stringify(body)}`);

  const wallet = account.address.toLowerCase();
  const admin = Bun.spawn(["bun", "src/main.ts", "admin", "grant", wallet, S.grantUsd, "--reason", "bench"], {
    cwd: ROOT,
    env,
    stdout: "pipe",
    stderr: "pipe",
  });
  const killer = setTimeout(() => admin.kill("SIGKILL"), 60_000);
  const [out, err, code] = await Promise.all([new Response(admin.stdout).text(), new Response(admin.stderr).text(), admin.exited]);
  clearTimeout(killer);
  if (code !== 0) throw new Error(`admin grant failed (${code}): ${err || out}`);
  log(out.trim());
  return { key: body.key, wallet };
}

// ───────────────────────────── measurements ─────────────────────────────

interface Target {
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

interface LatencyStats {
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
async function sequentialLatency(targets: Target[], warmup: number, n: number): Promise<{ stats: Record<string, LatencyStats>; warmOk: Record<string, number> }> {
  const warmOk: Record<string, number> = {};
  for (let i = 0; i < warmup; i++) for (const t of targets) if ((await once(t)).ok) warmOk[t.name] = (warmOk[t.name] ?? 0) + 1;
  const samples: Record<string, number[]> = {};
  const failures: Record<string, number> = {};
  for (const t of targets) (samples[t.name] = []), (failures[t.name] = 0);
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

interface LoadResult {
  /**
   * CPU cores used during the run (CPU seconds / wall seconds) by the process under test, the stand-in, Redis,
   * every Postgres process of the machine, the load generator, and the whole machine (busy time of /proc/stat).
   */
  cores: { target: number; standin: number; redis: number; postgres: number; loadgen: number; machine: number };
  /** Busy CPU time of the whole machine per answered request, µs: what one request costs all processes together. */
  machineUsPerRequest: number;
  /** CPU time of the process under test per answered request, µs. */
  cpuUsPerRequest: number;
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

let loadgen: string[] = [];
const CLK_TCK = Number(Bun.spawnSync(["getconf", "CLK_TCK"]).stdout.toString().trim()) || 100;

/** CPU seconds a process has used so far (all threads), from /proc/<pid>/stat. */
function cpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return NaN;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) / CLK_TCK; // utime, stime (fields 14 and 15)
  } catch {
    return NaN;
  }
}

/** CPU seconds used so far by every process named postgres (the server's backends and helpers). */
function postgresCpuSeconds(): number {
  let total = 0;
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      if (!stat.includes("(postgres)")) continue;
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      total += (Number(f[11]) + Number(f[12])) / CLK_TCK;
    } catch {
      // the process ended meanwhile
    }
  }
  return total;
}

/** Busy CPU seconds of the whole machine so far (all cores; everything but idle and iowait), from /proc/stat. */
function machineBusySeconds(): number {
  const f = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = f;
  return (user + nice + system + irq + softirq + steal) / CLK_TCK;
}

/** Processes whose CPU time is sampled around each load run. */
interface Watch {
  target: number;
  standin: number;
  redis: number;
}

/** Concurrency N for a fixed duration with autocannon in its own process (so it never shares our event loop). */
async function autocannon(t: Target, connections: number, durationS: number, watch: Watch): Promise<LoadResult> {
  const args = [
    ...loadgen, join(ROOT, "node_modules", "autocannon", "autocannon.js"),
    "-j", "-n", "-c", String(connections), "-d", String(durationS), "-t", "10", "-m", "POST",
    ...Object.entries(t.headers).flatMap(([k, v]) => ["-H", `${k}=${v}`]),
    "-b", t.body, t.url,
  ];
  const cpu0 = { target: cpuSeconds(watch.target), standin: cpuSeconds(watch.standin), redis: cpuSeconds(watch.redis), postgres: postgresCpuSeconds(), machine: machineBusySeconds() };
  const wall0 = performance.now();
  const p = Bun.spawn(args, { cwd: ROOT, stdout: "pipe", stderr: "pipe", stdin: "ignore" });
  const killer = setTimeout(() => p.kill("SIGKILL"), (durationS + 60) * 1000);
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  clearTimeout(killer);
  const cpu1 = { target: cpuSeconds(watch.target), standin: cpuSeconds(watch.standin), redis: cpuSeconds(watch.redis), postgres: postgresCpuSeconds(), machine: machineBusySeconds() };
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
    postgres: (cpu1.postgres - cpu0.postgres) / wallS,
    loadgen: loadgenCpuS / wallS,
    machine: (cpu1.machine - cpu0.machine) / wallS,
  };
  return {
    cores,
    machineUsPerRequest: ((cpu1.machine - cpu0.machine) / Math.max(1, r["2xx"])) * 1e6,
    cpuUsPerRequest: ((cores.target * wallS) / Math.max(1, r["2xx"])) * 1e6,
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
async function machineBusy(ms = 1_000): Promise<number> {
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

function rssKb(pid: number): { rssKb: number; hwmKb: number } {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN);
    return { rssKb: field("VmRSS"), hwmKb: field("VmHWM") };
  } catch {
    return { rssKb: NaN, hwmKb: NaN };
  }
}

async function checkAnswer(t: Target): Promise<void> {
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

// ───────────────────────────── report ─────────────────────────────

interface DelayResult {
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

const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : "n/a");
const f3 = (x: number) => (Number.isFinite(x) ? x.toFixed(3) : "n/a");
const f0 = (x: number) => (Number.isFinite(x) ? Math.round(x).toLocaleString("en-US") : "n/a");
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const verdict = (ok: boolean) => (ok ? "PASS" : "FAIL");

function report(meta: Record<string, unknown>, results: DelayResult[], rss: { after: ReturnType<typeof rssKb>; idle: ReturnType<typeof rssKb>; baselineAfter: ReturnType<typeof rssKb> }, valid: boolean): string {
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

// ───────────────────────────── main ─────────────────────────────

async function main(): Promise<number> {
  const started = Date.now();
  workDir = mkdtempSync(join(tmpdir(), "gw-bench-"));
  mkdirSync(RESULTS, { recursive: true });
  const loadBefore = loadavg().map((x) => x.toFixed(2)).join(" ");
  const busyBefore = await machineBusy();
  if (busyBefore > 0.15) log(`warning: ${Math.round(busyBefore * 100)}% of the CPU is busy before the bench starts; figures will be noisy`);

  const nodeOk = process.env.BENCH_LOADGEN !== "bun" && Bun.which("node") !== null;
  loadgen = nodeOk ? [Bun.which("node")!] : [process.execPath];
  const loadgenName = nodeOk ? `node ${Bun.spawnSync(["node", "--version"]).stdout.toString().trim()}` : `bun ${Bun.version}`;

  // 1. stand-ins and baseline proxies, each in its own process
  const standinPorts: Record<number, number> = {};
  const standinChildren: Record<number, Child> = {};
  const baselinePorts: Record<number, number> = {};
  const baselineChildren: Record<number, Child> = {};
  for (const d of S.delays) {
    const c = spawnChild(`standin-${d}ms`, [process.execPath, "bench/standin.ts", String(d)], { pipeStdout: true });
    standinPorts[d] = await readyPort(c);
    standinChildren[d] = c;
  }
  for (const d of S.delays) {
    const c = spawnChild(`baseline-${d}ms`, [process.execPath, "bench/baseline-proxy.ts", `http://127.0.0.1:${standinPorts[d]}/v1`], { pipeStdout: true });
    baselinePorts[d] = await readyPort(c);
    baselineChildren[d] = c;
  }
  log(`stand-ins on ${JSON.stringify(standinPorts)}, baseline proxies on ${JSON.stringify(baselinePorts)}`);

  // 2. Redis, Postgres, gateway
  const redisUrl = await startRedis();
  const db = await freshDatabase();
  const modelsFile = join(workDir, "models.json");
  writeFileSync(modelsFile, JSON.stringify(catalog(standinPorts), null, 2));
  const gwPort = freePort();
  const domain = `127.0.0.1:${gwPort}`;
  const gwEnv: Record<string, string> = {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: process.env.HOME ?? workDir,
    PORT: String(gwPort),
    HOST: "127.0.0.1",
    REDIS_URL: redisUrl,
    DATA_DIR: join(workDir, "data"),
    MODELS_FILE: modelsFile,
    STANDIN_KEY,
    LOG_LEVEL: "warn",
    RATE_LIMIT_REQUESTS: "10000000", // the configured maximum; the limiter must not reject the load
    SIWE_DOMAIN: domain,
    SIWE_CHAIN_IDS: "31337",
    DEPLOYMENT: "local",
    ...(db ? { DATABASE_URL: db.url } : {}),
  };
  const profileDir = join(workDir, "profile");
  const profFlags = PROFILE ? ["--cpu-prof", "--cpu-prof-md", `--cpu-prof-dir=${profileDir}`] : [];
  const gw = spawnChild("gateway", [process.execPath, ...profFlags, "src/main.ts", "serve"], { env: gwEnv });
  const gwBase = `http://${domain}`;
  await waitHealthy(gw, gwBase);
  log(`gateway pid ${gw.proc.pid} healthy on ${gwBase} (database: ${db ? db.name : "embedded PGlite"})`);
  const { key } = await apiKeyWithCredit(gwBase, domain, gwEnv);

  const targetsFor = (d: number): Record<"direct" | "baseline" | "gateway", Target> => {
    const standinAuth = { "content-type": "application/json", authorization: `Bearer ${STANDIN_KEY}` };
    return {
      direct: { name: "direct", url: `http://127.0.0.1:${standinPorts[d]}/v1/chat/completions`, headers: standinAuth, body: directBody },
      baseline: { name: "baseline", url: `http://127.0.0.1:${baselinePorts[d]}/v1/chat/completions`, headers: standinAuth, body: directBody },
      gateway: {
        name: "gateway",
        url: `${gwBase}/v1/chat/completions`,
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: gatewayBody(d),
      },
    };
  };
  let gatewayOk = 0; // 2xx answers the gateway gave to us (to compare with the charges it recorded)
  for (const d of S.delays) {
    for (const t of Object.values(targetsFor(d))) {
      await checkAnswer(t);
      if (t.name === "gateway") gatewayOk++;
    }
  }

  // 3. concurrency 1
  const results: DelayResult[] = [];
  for (const d of S.delays) {
    const t = targetsFor(d);
    const n = d === 0 ? S.latN : S.latNSlow;
    const warm = d === 0 ? S.latWarmup : Math.ceil(S.latWarmup / 5);
    log(`concurrency 1, stand-in ${d} ms: ${warm} warm-up + ${n} requests per target`);
    const { stats: lat, warmOk } = await sequentialLatency([t.direct, t.baseline, t.gateway], warm, n);
    gatewayOk += (warmOk.gateway ?? 0) + lat.gateway!.n - lat.gateway!.failures;
    log(`  direct p50 ${f3(lat.direct!.p50)} p99 ${f3(lat.direct!.p99)} · gateway p50 ${f3(lat.gateway!.p50)} p99 ${f3(lat.gateway!.p99)}`);
    results.push({
      delayMs: d,
      latency: lat,
      addedP50Ms: lat.gateway!.p50 - lat.direct!.p50,
      addedP99Ms: lat.gateway!.p99 - lat.direct!.p99,
      baselineAddedP50Ms: lat.baseline!.p50 - lat.direct!.p50,
      baselineAddedP99Ms: lat.baseline!.p99 - lat.direct!.p99,
      throughput: { gateway: [], baseline: [], direct: [] },
      gatewayRps: NaN,
      baselineRps: NaN,
      directRps: NaN,
      ratio: NaN,
      non2xx: 0,
    });
  }
  const idleRss = rssKb(gw.proc.pid);

  // 4. concurrency 32: warm-up each, then alternate baseline / gateway per round
  let extraInFlight = 0; // requests autocannon had in flight when it stopped: answered by the gateway but not counted
  for (const r of results) {
    const t = targetsFor(r.delayMs);
    const pids = { gateway: gw.proc.pid, baseline: baselineChildren[r.delayMs]!.proc.pid, direct: standinChildren[r.delayMs]!.proc.pid };
    const watch = (x: Target): Watch => ({ target: pids[x.name], standin: standinChildren[r.delayMs]!.proc.pid, redis: redisPid });
    if (S.warmupS > 0) {
      log(`concurrency ${S.connections}, stand-in ${r.delayMs} ms: warm-up`);
      for (const x of [t.baseline, t.gateway]) {
        const w = await autocannon(x, S.connections, S.warmupS, watch(x));
        if (x.name === "gateway") (gatewayOk += w.ok2xx), (extraInFlight += S.connections);
      }
    }
    for (let round = 0; round < S.rounds; round++) {
      const order = round % 2 === 0 ? [t.baseline, t.gateway] : [t.gateway, t.baseline];
      for (const x of order) {
        const res = await autocannon(x, S.connections, S.durationS, watch(x));
        r.throughput[x.name].push(res);
        if (x.name === "gateway") (gatewayOk += res.ok2xx), (extraInFlight += S.connections);
        log(
          `  ${r.delayMs} ms round ${round + 1} ${x.name}: ${f0(res.rps)} req/s, non-2xx ${res.non2xx}, errors ${res.errors}, timeouts ${res.timeouts}; ` +
            `cores: ${x.name} ${f2(res.cores.target)}, stand-in ${f2(res.cores.standin)}, redis ${f2(res.cores.redis)}, postgres ${f2(res.cores.postgres)}, ` +
            `autocannon ${f2(res.cores.loadgen)}, machine ${f2(res.cores.machine)}; ` +
            `${f0(res.cpuUsPerRequest)} µs CPU/request`,
        );
      }
    }
    const direct = await autocannon(t.direct, S.connections, Math.max(2, Math.ceil(S.durationS / 2)), watch(t.direct));
    r.throughput.direct.push(direct);
    log(`  ${r.delayMs} ms direct to stand-in: ${f0(direct.rps)} req/s`);
    r.gatewayRps = mean(r.throughput.gateway.map((x) => x.rps));
    r.baselineRps = mean(r.throughput.baseline.map((x) => x.rps));
    r.directRps = direct.rps;
    r.ratio = r.gatewayRps / r.baselineRps;
    r.non2xx = [...r.throughput.gateway, ...r.throughput.baseline, ...r.throughput.direct].reduce((a, x) => a + x.non2xx + x.errors + x.timeouts, 0);
  }
  const afterRss = rssKb(gw.proc.pid);
  const redisStats = await redisCommandStats();
  const baselineAfter = rssKb(baselineChildren[0]!.proc.pid);

  // 5. ledger check: stop the gateway (it drains its outbox), then count the charges Postgres recorded
  let ledgerCheck: string | undefined;
  let ledgerOk = true;
  let redisPerCharge = "";
  if (db) {
    await stopChild(gw);
    const sql = postgres(db.url, { max: 1, onnotice: () => {} });
    try {
      const [row] = await sql<{ n: string }[]>`SELECT count(*)::text AS n FROM ledger_events WHERE type = 'charge'`;
      const charges = Number(row?.n ?? 0);
      ledgerOk = charges >= gatewayOk && charges <= gatewayOk + extraInFlight;
      const top = Object.entries(redisStats)
        .filter(([, v]) => v.calls / Math.max(1, charges) >= 0.001)
        .sort((a, b) => b[1].usec - a[1].usec)
        .map(([k, v]) => `${k} ${(v.calls / charges).toFixed(3)} (${(v.usec / v.calls).toFixed(1)} µs each)`);
      redisPerCharge = `Redis commands per charged request over the whole run: ${top.join(", ")}.`;
      ledgerCheck =
        `${f0(charges)} charges recorded in Postgres after shutdown for ${f0(gatewayOk)} gateway answers counted by the clients ` +
        `(+ up to ${extraInFlight} in flight when autocannon stopped): ${ledgerOk ? "consistent" : "MISMATCH"}.`;
    } finally {
      await sql.end({ timeout: 5 });
    }
  }

  const profiles: string[] = [];
  if (PROFILE) {
    await stopChild(gw);
    for (const f of existsSync(profileDir) ? readdirSync(profileDir) : []) {
      const dest = `profile-${new Date().toISOString().replace(/[:.]/g, "-")}-${f}`;
      copyFileSync(join(profileDir, f), join(RESULTS, dest));
      profiles.push(`bench/results/${dest}`);
    }
    log(profiles.length ? `gateway CPU profile: ${profiles.join(", ")}` : "no CPU profile was written");
  }

  const valid = results.every((r) => r.non2xx === 0 && Object.values(r.latency).every((s) => s.failures === 0)) && ledgerOk;
  const date = new Date().toISOString();
  const meta = {
    date,
    bun: Bun.version,
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model.trim() ?? "?",
    loadavgBefore: loadBefore,
    loadavgAfter: loadavg().map((x) => x.toFixed(2)).join(" "),
    cpuBusyBeforePct: Math.round(busyBefore * 100),
    loadgen: loadgenName,
    postgres: db ? "machine's server, fresh database" : "embedded PGlite",
    commit: Bun.spawnSync(["git", "rev-parse", "--short", "HEAD"], { cwd: ROOT }).stdout.toString().trim() || "?",
    ledgerCheck,
    redisPerCharge,
    redisStats,
    profiles,
    runtimeS: Math.round((Date.now() - started) / 1000),
  };
  const rss = { idle: idleRss, after: afterRss, baselineAfter };
  const md = report(meta, results, rss, valid);
  process.stdout.write("\n" + md);

  const json = { meta, settings: S, targets: TARGETS, valid, results, rss };
  const stamp = date.replace(/[:.]/g, "-");
  writeFileSync(join(RESULTS, "latest.md"), md);
  writeFileSync(join(RESULTS, "latest.json"), JSON.stringify(json, null, 2) + "\n");
  writeFileSync(join(RESULTS, `${stamp}.json`), JSON.stringify(json, null, 2) + "\n");
  log(`wrote bench/results/latest.md, latest.json and ${stamp}.json (run took ${meta.runtimeS} s)`);
  return valid ? 0 : 1;
}

const watchdog = setTimeout(() => {
  log(`watchdog: the run exceeded ${S.watchdogMs / 60_000} min; stopping`);
  void cleanup().finally(() => process.exit(124));
}, S.watchdogMs);

let code = 1;
try {
  code = await main();
} catch (e) {
  log(`failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
  for (const c of children) if (existsSync(c.logFile) && tail(c.logFile)) log(`--- ${c.name} log tail ---\n${tail(c.logFile)}`);
  code = 1;
} finally {
  await cleanup();
  clearTimeout(watchdog);
}
process.exit(code);
