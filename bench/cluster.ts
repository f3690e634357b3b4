/**
 * One Redis against a Redis Cluster: `bun bench/cluster.ts` starts one provider stand-in (0 ms), a private
 * redis-server, a real Redis Cluster (3 masters + 3 replicas, test/helpers/cluster.ts), a fresh database for each,
 * and two gateways (`bun src/main.ts serve`), one per Redis setup, then sends both the same load (autocannon,
 * concurrency 32, rounds alternating their order) and reports, per mode:
 *   · gateway CPU µs per request (the target: cluster ≤ 1.2 × single-node),
 *   · Redis CPU µs per request, per node (masters and replicas),
 *   · how the ledger's script calls spread over the masters (INFO commandstats),
 *   · throughput, and the charges Postgres recorded against the answers counted.
 * Writes bench/results/cluster-latest.md and cluster-<time>.json. Knobs: BENCH_QUICK, BENCH_DURATION_S,
 * BENCH_WARMUP_S, BENCH_ROUNDS, BENCH_CONNECTIONS (settings.ts).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { RedisNames } from "../src/ledger/names.ts";
import { accountOn, startCluster, type TestCluster } from "../test/helpers/cluster.ts";
import { autocannon, checkAnswer, cpuSeconds, machineBusy, redisCommandStats, type Target } from "./measure.ts";
import {
  apiKeyWithCredit,
  cleanUpOnSignals,
  cleanup,
  freshDatabase,
  type Gateway,
  logChildTails,
  onCleanup,
  openWorkDir,
  startGateway,
  startRedis,
  startUpstreams,
  stopChild,
} from "./processes.ts";
import { f0, f2, mean } from "./report.ts";
import { gatewayBody, log, RESULTS, ROOT, S } from "./settings.ts";

/** Gateway CPU per request in cluster mode may cost at most this much more than on one Redis. */
const TARGET_RATIO = 1.2;

interface RedisNode {
  name: string;
  pid: number;
  url: string;
  master?: boolean;
}

interface Mode {
  name: "single" | "cluster";
  gw: Gateway;
  /** One API key per wallet; the load is spread over them (one autocannon each). */
  keys: string[];
  db?: { url: string; name: string };
  nodes: RedisNode[];
  runs: { rps: number; ok: number; gatewayUsPerRequest: number; redisUsPerRequest: Record<string, number> }[];
  answered: number;
  /** Requests autocannon may have had in flight when it stopped: answered (and charged) but not counted. */
  inFlight: number;
}

async function masterFlags(cluster: TestCluster): Promise<Set<number>> {
  return new Set((await cluster.masters()).map((m) => m.port));
}

const target = (m: Mode, key: string): Target => ({
  name: "gateway",
  url: `${m.gw.base}/v1/chat/completions`,
  headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
  body: gatewayBody(0),
});

/** The load of one run: S.connections split over the wallets' keys, one autocannon each, all at once. */
async function load(m: Mode, durationS: number): Promise<Mode["runs"][number]> {
  const pids = [m.gw.child.proc.pid, ...m.nodes.map((n) => n.pid)];
  const before = pids.map(cpuSeconds);
  const loadgen = [Bun.which("node") ?? process.execPath];
  const per = Math.max(1, Math.round(S.connections / m.keys.length));
  const rs = await Promise.all(
    m.keys.map((key) => autocannon(loadgen, target(m, key), per, durationS, { target: m.gw.child.proc.pid, standin: 0, redis: 0 })),
  );
  const after = pids.map(cpuSeconds);
  const bad = rs.reduce((a, r) => a + r.non2xx + r.errors + r.timeouts, 0);
  if (bad > 0) throw new Error(`${m.name}: ${bad} requests failed (non-2xx, errors or timeouts)`);
  const ok = rs.reduce((a, r) => a + r.ok2xx, 0);
  m.answered += ok;
  m.inFlight += per * m.keys.length;
  const usPerRequest = (i: number) => ((after[i]! - before[i]!) / Math.max(1, ok)) * 1e6;
  return {
    rps: rs.reduce((a, r) => a + r.rps, 0),
    ok,
    gatewayUsPerRequest: usPerRequest(0),
    redisUsPerRequest: Object.fromEntries(m.nodes.map((n, i) => [n.name, usPerRequest(i + 1)])),
  };
}

/** Stops the gateway (it drains its outbox) and counts the charges its database recorded. */
async function charges(m: Mode): Promise<number> {
  await stopChild(m.gw.child);
  if (!m.db) return NaN;
  const sql = postgres(m.db.url, { max: 1, onnotice: () => {} });
  try {
    const [row] = await sql<{ n: string }[]>`SELECT count(*)::text AS n FROM ledger_events WHERE type = 'charge'`;
    return Number(row?.n ?? 0);
  } finally {
    await sql.end({ timeout: 5 });
  }
}

async function main(): Promise<number> {
  openWorkDir();
  mkdirSync(RESULTS, { recursive: true });
  const busyBefore = await machineBusy();
  if (busyBefore > 0.15) log(`warning: ${Math.round(busyBefore * 100)}% of the CPU is busy before the bench starts; figures will be noisy`);
  const loadBefore = loadavg()
    .map((x) => x.toFixed(2))
    .join(" ");

  const upstreams = await startUpstreams([0]);
  const redis = await startRedis();
  const cluster = await startCluster({ nodeTimeoutMs: 5_000 });
  onCleanup(() => cluster.stop());
  const masters = await masterFlags(cluster);
  const [dbSingle, dbCluster] = [await freshDatabase(), await freshDatabase()];

  const single: Mode = {
    name: "single",
    gw: await startGateway(upstreams, redis.url, dbSingle, "gateway-single"),
    keys: [],
    db: dbSingle,
    nodes: [{ name: "redis", pid: redis.pid, url: redis.url, master: true }],
    runs: [],
    answered: 0,
    inFlight: 0,
  };
  const clustered: Mode = {
    name: "cluster",
    gw: await startGateway(upstreams, { REDIS_CLUSTER_NODES: cluster.seeds }, dbCluster, "gateway-cluster"),
    keys: [],
    db: dbCluster,
    nodes: cluster.nodes.map((n) => ({
      name: `${masters.has(n.port) ? "master" : "replica"} :${n.port}`,
      pid: n.proc.pid,
      url: `redis://${n.address}`,
      master: masters.has(n.port),
    })),
    runs: [],
    answered: 0,
    inFlight: 0,
  };
  // One wallet per master of the cluster (its shard's slot on that master), the same wallets on one Redis.
  const keys = new RedisNames(48);
  const wallets = await Promise.all([...masters].map((port) => accountOn(cluster, port, (w) => keys.wallet(keys.shardOf(w), w))));
  for (const m of [single, clustered]) {
    for (const account of wallets) {
      m.keys.push((await apiKeyWithCredit(m.gw, account)).key);
      await checkAnswer(target(m, m.keys.at(-1)!));
      m.answered++;
    }
    if (S.warmupS > 0) {
      log(`${m.name}: warm-up`);
      m.answered += (await load(m, S.warmupS)).ok;
    }
  }
  // Command counters from here on: the measured rounds only.
  for (const n of [...single.nodes, ...clustered.nodes]) {
    const p = Bun.spawn(["redis-cli", "-u", n.url, "CONFIG", "RESETSTAT"], { stdout: "ignore", stderr: "ignore" });
    await p.exited;
  }
  for (let round = 0; round < S.rounds; round++) {
    for (const m of round % 2 === 0 ? [single, clustered] : [clustered, single]) {
      const r = await load(m, S.durationS);
      m.runs.push(r);
      log(
        `round ${round + 1} ${m.name}: ${f0(r.rps)} req/s, gateway ${f0(r.gatewayUsPerRequest)} µs CPU/request, redis ${Object.entries(
          r.redisUsPerRequest,
        )
          .map(([k, v]) => `${k} ${f0(v)}`)
          .join(", ")} µs/request`,
      );
    }
  }
  // How the script calls spread: evalsha (and eval) calls per node over the measured rounds.
  const scriptCalls = async (m: Mode) =>
    Object.fromEntries(
      await Promise.all(
        m.nodes
          .filter((n) => n.master)
          .map(async (n) => {
            const s = await redisCommandStats(n.url);
            return [n.name, (s.evalsha?.calls ?? 0) + (s.eval?.calls ?? 0)] as const;
          }),
      ),
    );
  const spread = { single: await scriptCalls(single), cluster: await scriptCalls(clustered) };
  const recorded = { single: await charges(single), cluster: await charges(clustered) };

  const gatewayUs = {
    single: mean(single.runs.map((r) => r.gatewayUsPerRequest)),
    cluster: mean(clustered.runs.map((r) => r.gatewayUsPerRequest)),
  };
  const ratio = gatewayUs.cluster / gatewayUs.single;
  const redisUs = (m: Mode) => Object.fromEntries(m.nodes.map((n) => [n.name, mean(m.runs.map((r) => r.redisUsPerRequest[n.name]!))]));
  const date = new Date().toISOString();
  const consistent = (m: Mode, n: number) => Number.isNaN(n) || (n >= m.answered && n <= m.answered + m.inFlight);
  const lines = [
    `# Gateway on one Redis vs a Redis Cluster — ${date}`,
    "",
    `bun ${Bun.version} · ${cpus().length} CPU · CPU busy before start ${Math.round(busyBefore * 100)}% · loadavg before ${loadBefore}, after ${loadavg()
      .map((x) => x.toFixed(2))
      .join(" ")} · ` +
      `autocannon ${S.connections} connections, ${S.rounds} × ${S.durationS} s per mode (alternating) after ${S.warmupS} s warm-up · stand-in 0 ms · cluster: 3 masters + 3 replicas on this machine`,
    "",
    "| mode | req/s | gateway CPU µs/request | Redis CPU µs/request (per node) | script calls per master |",
    "|---|---:|---:|---|---|",
    ...[single, clustered].map((m) => {
      const calls = spread[m.name];
      const total = Object.values(calls).reduce((a, b) => a + b, 0);
      return `| ${m.name} | ${f0(mean(m.runs.map((r) => r.rps)))} | ${f0(gatewayUs[m.name])} | ${Object.entries(redisUs(m))
        .map(([k, v]) => `${k}: ${f2(v)}`)
        .join(" · ")} | ${Object.entries(calls)
        .map(([k, v]) => `${k}: ${total ? Math.round((v / total) * 100) : 0}%`)
        .join(" · ")} |`;
    }),
    "",
    `**Gateway CPU per request, cluster / single: ${f2(ratio)}** (target ≤ ${TARGET_RATIO}: ${ratio <= TARGET_RATIO ? "PASS" : "FAIL"}).`,
    "",
    `Ledger: single ${f0(recorded.single)} charges for ${f0(single.answered)} answers counted (${consistent(single, recorded.single) ? "consistent" : "MISMATCH"}); ` +
      `cluster ${f0(recorded.cluster)} for ${f0(clustered.answered)} (${consistent(clustered, recorded.cluster) ? "consistent" : "MISMATCH"}) — requests in flight when autocannon stopped are charged but not counted (up to ${f0(single.inFlight)} per mode).`,
    "",
    "The load comes from one wallet per master (its own API key and autocannon), the same wallets in both modes; the spread column shows where the script calls ran.",
    "",
  ];
  const md = lines.join("\n");
  process.stdout.write("\n" + md);
  const stamp = date.replace(/[:.]/g, "-");
  const json = {
    date,
    settings: S,
    ratio,
    gatewayUs,
    redisUs: { single: redisUs(single), cluster: redisUs(clustered) },
    spread,
    recorded,
    runs: { single: single.runs, cluster: clustered.runs },
  };
  writeFileSync(join(RESULTS, "cluster-latest.md"), md);
  writeFileSync(join(RESULTS, `cluster-${stamp}.json`), JSON.stringify(json, null, 2) + "\n");
  log(`wrote bench/results/cluster-latest.md and cluster-${stamp}.json (${ROOT})`);
  return consistent(single, recorded.single) && consistent(clustered, recorded.cluster) ? 0 : 1;
}

cleanUpOnSignals();
const watchdog = setTimeout(() => {
  log("watchdog: the run exceeded 10 min; stopping");
  void cleanup().finally(() => process.exit(124));
}, 10 * 60_000);
let code = 1;
try {
  code = await main();
} catch (e) {
  log(`failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
  logChildTails();
} finally {
  await cleanup();
  clearTimeout(watchdog);
}
process.exit(code);
