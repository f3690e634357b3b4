/**
 * Load benchmark: one command (`bun bench/run.ts`, or `bun run bench`) that starts, all on 127.0.0.1,
 *   · two provider stand-ins (answer delay 0 ms and 20 ms), each in its own process,
 *   · a private redis-server and a fresh Postgres database (PGlite when Postgres is not reachable),
 *   · the gateway (`bun src/main.ts serve`) with a catalog pointing at both stand-ins,
 *   · a plain Bun pass-through proxy per stand-in as the baseline,
 * then measures, for each delay,
 *   · latency at concurrency 1 (sequential fetch loop, interleaved direct / baseline / gateway) → added p50/p99,
 *   · throughput at concurrency 32 (autocannon) for the gateway and the baseline → their ratio,
 * and against the 0 ms stand-in: wrk at concurrency 1 on one persistent connection (µs percentiles), streamed
 * answers (added time to first byte, streams/s against the baseline), the gateway's event-loop delay histogram
 * per phase, its RSS after the load and at peak, and Redis's CPU per charged request. It prints a markdown
 * table (issue 14's figures first, each beside the baseline) and writes bench/results/.
 * Every loop is bounded by count or duration, a watchdog ends the run, and everything it started is stopped
 * (and the temporary database dropped) on the way out, also on error or Ctrl-C.
 *
 * processes.ts starts and stops things, measure.ts and tail.ts measure, loopStall.ts reads the gateway's loop
 * monitor, phases.ts holds the phases, report.ts writes the table; this file runs the phases in order. Knobs: settings.ts and bench/README.md.
 */
import { copyFileSync, existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { checkAnswer, machineBusy, redisCommandStats, rssKb } from "./measure.ts";
import { type GatewayCount, latencyPhase, type Setup, setUp, streamPhase, targetsFor, throughputPhase, wrkPhase } from "./phases.ts";
import { cleanUpOnSignals, cleanup, type Gateway, logChildTails, openWorkDir, stopChild } from "./processes.ts";
import { f0, report } from "./report.ts";
import { DRY, log, PROFILE, RESULTS, ROOT, S, TARGETS } from "./settings.ts";
import { streamLatency, wrk, wrkPath } from "./tail.ts";
import { workersPhase } from "./workers.ts";

/**
 * Stops the gateway (it drains its outbox), then compares the charges Postgres recorded with the answers the
 * clients counted; and Redis's commands per charge. Skipped on PGlite, which lives inside the gateway.
 */
async function ledgerCheck(s: Setup, count: GatewayCount, redisStats: Record<string, { calls: number; usec: number }>) {
  if (!s.db) return { ok: true, line: undefined, redisPerCharge: "", scriptUsPerCharge: NaN };
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
    const scriptUsec = Object.entries(redisStats)
      .filter(([k]) => /^(evalsha|eval|evalsha_ro|eval_ro|fcall)$/.test(k))
      .reduce((a, [, v]) => a + v.usec, 0);
    return {
      ok,
      line,
      redisPerCharge: `Redis commands per charged request over the whole run: ${top.join(", ")}.`,
      scriptUsPerCharge: charges > 0 ? scriptUsec / charges : NaN,
    };
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
  const workDir = openWorkDir();
  mkdirSync(RESULTS, { recursive: true });
  const loadBefore = loadavg()
    .map((x) => x.toFixed(2))
    .join(" ");
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
  const streams = targetsFor(s, 0, true);
  const streamCheck = await streamLatency([streams.direct, streams.baseline, streams.gateway], 0, 1);
  const streamFailures = Object.entries(streamCheck)
    .filter(([, x]) => x.failures > 0)
    .map(([k]) => k);
  if (streamFailures.length) throw new Error(`streamed sanity request failed for: ${streamFailures.join(", ")}`);
  count.ok++;
  await s.loop.reset();
  if (!(await s.loop.read("sanity"))) throw new Error("the gateway's event-loop monitor (bench/loopStall.preload.ts) did not answer");
  if (DRY) {
    if (wrkPath()) {
      const w = await wrk(workDir, targetsFor(s, 0).gateway, 1);
      if (w.failures > 0 || w.requests === 0) throw new Error(`wrk against the gateway: ${w.failures} failures of ${w.requests}`);
      count.ok += w.requests;
      log(`dry run: wrk answered (${w.requests} requests in 1 s)`);
    } else log("dry run: wrk is not installed (bash scripts/setup.sh); the full run skips its figures");
    log("dry run: everything started and every target answered (JSON and streamed); stopping without measuring");
    return 0;
  }

  const results = await latencyPhase(s, count);
  const idleRss = rssKb(s.gw.child.proc.pid);
  const wrkFigures = await wrkPhase(s, workDir, count);
  const stream = await streamPhase(s, loadgen, count);
  await throughputPhase(s, results, loadgen, count);
  const afterRss = rssKb(s.gw.child.proc.pid);
  const redisStats = await redisCommandStats(s.redis.url);
  const baselineAfter = rssKb(s.upstreams[0]!.baseline.proc.pid);
  const ledger = await ledgerCheck(s, count, redisStats);
  const profiles = await collectProfiles(s.gw);
  // Every core: WORKERS=2 beside two plain proxies on one port, once the single-process gateway has stopped (with
  // PGlite it lives on inside that gateway, which then keeps running beside).
  const workers = await workersPhase(s, loadgen, false);

  const valid =
    results.every((r) => r.non2xx === 0 && Object.values(r.latency).every((x) => x.failures === 0)) &&
    (wrkFigures?.failures ?? 0) === 0 &&
    stream.failures === 0 &&
    ledger.ok;
  const date = new Date().toISOString();
  const meta = {
    date,
    bun: Bun.version,
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model.trim() ?? "?",
    loadavgBefore: loadBefore,
    loadavgAfter: loadavg()
      .map((x) => x.toFixed(2))
      .join(" "),
    cpuBusyBeforePct: Math.round(busyBefore * 100),
    loadgen: loadgenName,
    postgres: s.db ? "machine's server, fresh database" : "embedded PGlite",
    commit: Bun.spawnSync(["git", "rev-parse", "--short", "HEAD"], { cwd: ROOT }).stdout.toString().trim() || "?",
    ledgerCheck: ledger.line,
    redisPerCharge: ledger.redisPerCharge,
    redisScriptUsPerCharge: ledger.scriptUsPerCharge,
    gatewayLogLevel: S.gatewayLogLevel,
    creditLeases: s.gw.env.CREDIT_LEASES,
    redisStats,
    profiles,
    runtimeS: Math.round((Date.now() - started) / 1000),
  };
  const rss = { idle: idleRss, after: afterRss, baselineAfter };
  const md =
    report(meta, results, rss, valid, wrkFigures, stream) +
    `\n## Every core: WORKERS=2 against two plain proxies on one port (reusePort)\n\nJSON at concurrency 32, 0 ms stand-in.\n\n${workers.table.join("\n")}\n`;
  process.stdout.write("\n" + md);

  const json = {
    meta,
    settings: S,
    targets: TARGETS,
    valid,
    results,
    wrk: wrkFigures ?? null,
    stream,
    rss,
    workers: { rps: workers.rps, rss: workers.rss },
  };
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
