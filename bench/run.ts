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
 * processes.ts starts and stops things, measure.ts measures, report.ts writes the table; this file runs the
 * phases in order. Knobs: settings.ts and bench/README.md.
 */
import { copyFileSync, existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { STANDIN_KEY } from "../test/helpers/catalog.ts";
import { autocannon, checkAnswer, machineBusy, redisCommandStats, rssKb, sequentialLatency, type Target, type Watch } from "./measure.ts";
import {
  apiKeyWithCredit, cleanUpOnSignals, cleanup, freshDatabase, type Gateway, logChildTails, openWorkDir, startGateway, startRedis,
  startUpstreams, stopChild, type Upstream,
} from "./processes.ts";
import { type DelayResult, f0, f2, f3, mean, report } from "./report.ts";
import { DRY, directBody, gatewayBody, log, PROFILE, RESULTS, ROOT, S, TARGETS } from "./settings.ts";

/** Everything started for the run, and the key its gateway requests use. */
interface Setup {
  upstreams: Record<number, Upstream>;
  redis: { url: string; pid: number };
  db: { url: string; name: string } | undefined;
  gw: Gateway;
  key: string;
}

/** Requests answered 2xx by the gateway as the clients counted them, to compare with the charges it recorded. */
interface GatewayCount {
  ok: number;
  /** Requests autocannon had in flight when it stopped: answered by the gateway but not counted. */
  extraInFlight: number;
}

async function setUp(): Promise<Setup> {
  const upstreams = await startUpstreams(S.delays);
  const redis = await startRedis();
  const db = await freshDatabase();
  const gw = await startGateway(upstreams, redis.url, db);
  log(`gateway pid ${gw.child.proc.pid} healthy on ${gw.base} (database: ${db ? db.name : "embedded PGlite"})`);
  const { key } = await apiKeyWithCredit(gw);
  return { upstreams, redis, db, gw, key };
}

function targetsFor(s: Setup, d: number): Record<"direct" | "baseline" | "gateway", Target> {
  const standinAuth = { "content-type": "application/json", authorization: `Bearer ${STANDIN_KEY}` };
  const u = s.upstreams[d]!;
  return {
    direct: { name: "direct", url: `http://127.0.0.1:${u.standinPort}/v1/chat/completions`, headers: standinAuth, body: directBody },
    baseline: { name: "baseline", url: `http://127.0.0.1:${u.baselinePort}/v1/chat/completions`, headers: standinAuth, body: directBody },
    gateway: {
      name: "gateway",
      url: `${s.gw.base}/v1/chat/completions`,
      headers: { "content-type": "application/json", authorization: `Bearer ${s.key}` },
      body: gatewayBody(d),
    },
  };
}

/** Concurrency 1 per delay: interleaved sequential requests; one DelayResult per delay, throughput still empty. */
async function latencyPhase(s: Setup, count: GatewayCount): Promise<DelayResult[]> {
  const results: DelayResult[] = [];
  for (const d of S.delays) {
    const t = targetsFor(s, d);
    const n = d === 0 ? S.latN : S.latNSlow;
    const warm = d === 0 ? S.latWarmup : Math.ceil(S.latWarmup / 5);
    log(`concurrency 1, stand-in ${d} ms: ${warm} warm-up + ${n} requests per target`);
    const { stats: lat, warmOk } = await sequentialLatency([t.direct, t.baseline, t.gateway], warm, n);
    count.ok += (warmOk.gateway ?? 0) + lat.gateway!.n - lat.gateway!.failures;
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
  return results;
}

/** Concurrency N per delay: warm-up each, then alternate baseline / gateway per round, then the stand-in alone. */
async function throughputPhase(s: Setup, results: DelayResult[], loadgen: string[], count: GatewayCount): Promise<void> {
  const load = (x: Target, durationS: number, watch: Watch) => autocannon(loadgen, x, S.connections, durationS, watch);
  for (const r of results) {
    const t = targetsFor(s, r.delayMs);
    const u = s.upstreams[r.delayMs]!;
    const pids = { gateway: s.gw.child.proc.pid, baseline: u.baseline.proc.pid, direct: u.standin.proc.pid };
    const watch = (x: Target): Watch => ({ target: pids[x.name], standin: u.standin.proc.pid, redis: s.redis.pid });
    if (S.warmupS > 0) {
      log(`concurrency ${S.connections}, stand-in ${r.delayMs} ms: warm-up`);
      for (const x of [t.baseline, t.gateway]) {
        const w = await load(x, S.warmupS, watch(x));
        if (x.name === "gateway") (count.ok += w.ok2xx), (count.extraInFlight += S.connections);
      }
    }
    for (let round = 0; round < S.rounds; round++) {
      const order = round % 2 === 0 ? [t.baseline, t.gateway] : [t.gateway, t.baseline];
      for (const x of order) {
        const res = await load(x, S.durationS, watch(x));
        r.throughput[x.name].push(res);
        if (x.name === "gateway") (count.ok += res.ok2xx), (count.extraInFlight += S.connections);
        log(
          `  ${r.delayMs} ms round ${round + 1} ${x.name}: ${f0(res.rps)} req/s, non-2xx ${res.non2xx}, errors ${res.errors}, timeouts ${res.timeouts}; ` +
            `cores: ${x.name} ${f2(res.cores.target)}, stand-in ${f2(res.cores.standin)}, redis ${f2(res.cores.redis)}, postgres ${f2(res.cores.postgres)}, ` +
            `autocannon ${f2(res.cores.loadgen)}, machine ${f2(res.cores.machine)}; ` +
            `${f0(res.cpuUsPerRequest)} µs CPU/request`,
        );
      }
    }
    const direct = await load(t.direct, Math.max(2, Math.ceil(S.durationS / 2)), watch(t.direct));
    r.throughput.direct.push(direct);
    log(`  ${r.delayMs} ms direct to stand-in: ${f0(direct.rps)} req/s`);
    r.gatewayRps = mean(r.throughput.gateway.map((x) => x.rps));
    r.baselineRps = mean(r.throughput.baseline.map((x) => x.rps));
    r.directRps = direct.rps;
    r.ratio = r.gatewayRps / r.baselineRps;
    r.non2xx = [...r.throughput.gateway, ...r.throughput.baseline, ...r.throughput.direct].reduce((a, x) => a + x.non2xx + x.errors + x.timeouts, 0);
  }
}

/**
 * Stops the gateway (it drains its outbox), then compares the charges Postgres recorded with the answers the
 * clients counted; and Redis's commands per charge. Skipped on PGlite, which lives inside the gateway.
 */
async function ledgerCheck(s: Setup, count: GatewayCount, redisStats: Record<string, { calls: number; usec: number }>) {
  if (!s.db) return { ok: true, line: undefined, redisPerCharge: "" };
  await stopChild(s.gw.child);
  const sql = postgres(s.db.url, { max: 1, onnotice: () => {} });
  try {
    const [row] = await sql<{ n: string }[]>`SELECT count(*)::text AS n FROM ledger_events WHERE type = 'charge'`;
    const charges = Number(row?.n ?? 0);
    const ok = charges >= count.ok && charges <= count.ok + count.extraInFlight;
    const top = Object.entries(redisStats)
      .filter(([, v]) => v.calls / Math.max(1, charges) >= 0.001)
      .sort((a, b) => b[1].usec - a[1].usec)
      .map(([k, v]) => `${k} ${(v.calls / charges).toFixed(3)} (${(v.usec / v.calls).toFixed(1)} µs each)`);
    const line =
      `${f0(charges)} charges recorded in Postgres after shutdown for ${f0(count.ok)} gateway answers counted by the clients ` +
      `(+ up to ${count.extraInFlight} in flight when autocannon stopped): ${ok ? "consistent" : "MISMATCH"}.`;
    return { ok, line, redisPerCharge: `Redis commands per charged request over the whole run: ${top.join(", ")}.` };
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/** Under BENCH_PROFILE: stops the gateway so it writes its CPU profile, and copies it to bench/results/. */
async function collectProfiles(gw: Gateway): Promise<string[]> {
  if (!PROFILE) return [];
  const profiles: string[] = [];
  await stopChild(gw.child);
  for (const f of existsSync(gw.profileDir) ? readdirSync(gw.profileDir) : []) {
    const dest = `profile-${new Date().toISOString().replace(/[:.]/g, "-")}-${f}`;
    copyFileSync(join(gw.profileDir, f), join(RESULTS, dest));
    profiles.push(`bench/results/${dest}`);
  }
  log(profiles.length ? `gateway CPU profile: ${profiles.join(", ")}` : "no CPU profile was written");
  return profiles;
}

async function main(): Promise<number> {
  const started = Date.now();
  openWorkDir();
  mkdirSync(RESULTS, { recursive: true });
  const loadBefore = loadavg().map((x) => x.toFixed(2)).join(" ");
  const busyBefore = await machineBusy();
  if (busyBefore > 0.15) log(`warning: ${Math.round(busyBefore * 100)}% of the CPU is busy before the bench starts; figures will be noisy`);

  const nodeOk = process.env.BENCH_LOADGEN !== "bun" && Bun.which("node") !== null;
  const loadgen = nodeOk ? [Bun.which("node")!] : [process.execPath];
  const loadgenName = nodeOk ? `node ${Bun.spawnSync(["node", "--version"]).stdout.toString().trim()}` : `bun ${Bun.version}`;

  const s = await setUp();
  const count: GatewayCount = { ok: 0, extraInFlight: 0 };
  for (const d of S.delays) {
    for (const t of Object.values(targetsFor(s, d))) {
      await checkAnswer(t);
      if (t.name === "gateway") count.ok++;
    }
  }
  if (DRY) {
    log("dry run: everything started and every target answered; stopping without measuring");
    return 0;
  }

  const results = await latencyPhase(s, count);
  const idleRss = rssKb(s.gw.child.proc.pid);
  await throughputPhase(s, results, loadgen, count);
  const afterRss = rssKb(s.gw.child.proc.pid);
  const redisStats = await redisCommandStats(s.redis.url);
  const baselineAfter = rssKb(s.upstreams[0]!.baseline.proc.pid);
  const ledger = await ledgerCheck(s, count, redisStats);
  const profiles = await collectProfiles(s.gw);

  const valid = results.every((r) => r.non2xx === 0 && Object.values(r.latency).every((x) => x.failures === 0)) && ledger.ok;
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
    postgres: s.db ? "machine's server, fresh database" : "embedded PGlite",
    commit: Bun.spawnSync(["git", "rev-parse", "--short", "HEAD"], { cwd: ROOT }).stdout.toString().trim() || "?",
    ledgerCheck: ledger.line,
    redisPerCharge: ledger.redisPerCharge,
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

cleanUpOnSignals();
const watchdog = setTimeout(() => {
  log(`watchdog: the run exceeded ${S.watchdogMs / 60_000} min; stopping`);
  void cleanup().finally(() => process.exit(124));
}, S.watchdogMs);

let code = 1;
try {
  code = await main();
} catch (e) {
  log(`failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
  logChildTails();
  code = 1;
} finally {
  await cleanup();
  clearTimeout(watchdog);
}
process.exit(code);
