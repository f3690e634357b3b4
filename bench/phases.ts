/**
 * The benchmark's phases, in the order run.ts runs them: set-up; concurrency 1 (the fetch loop, wrk on one
 * persistent connection, streamed answers' first byte); streams per second; throughput at concurrency N. Each
 * phase under load records the gateway's event-loop delay histogram of its own (loopStall.ts).
 */
import { STANDIN_KEY } from "../test/helpers/catalog.ts";
import { type LoopStall, LoopMonitor } from "./loopStall.ts";
import { autocannon, type LoadResult, redisCommandStats, scriptDelta, sequentialLatency, type Target, type Watch } from "./measure.ts";
import {
  apiKeyWithCredit,
  freshDatabase,
  type Gateway,
  startAnthropicUpstream,
  startGateway,
  startRedis,
  startUpstreams,
  type Upstream,
} from "./processes.ts";
import { type DelayResult, f0, f2, f3, mean, type StreamRate, type StreamResult, type WrkFigures } from "./report.ts";
import { directBody, directStreamBody, gatewayBody, gatewayStreamBody, log, S } from "./settings.ts";
import { streamLatency, type WrkResult, wrkPath, wrkRotating } from "./tail.ts";

/** Everything started for the run, and the key its gateway requests use. */
export interface Setup {
  upstreams: Record<number, Upstream>;
  redis: { url: string; pid: number };
  db: { url: string; name: string } | undefined;
  gw: Gateway;
  key: string;
  loop: LoopMonitor;
  /** The 0 ms baseline proxy's loop monitor: the loop delay a plain Bun server sees on this machine meanwhile. */
  baselineLoop: LoopMonitor;
  /** The Anthropic-format stand-in behind CLAUDE_MODEL (the front doors' figures). */
  anthropic: { pid: number; port: number };
}

/** Requests answered 2xx by the gateway as the clients counted them, to compare with the charges it recorded. */
export interface GatewayCount {
  ok: number;
  /** Requests a load generator had in flight when it stopped: answered by the gateway but not counted. */
  extraInFlight: number;
}

/** Starts everything and makes the API key (with credit) the gateway's requests use. */
export async function setUp(): Promise<Setup> {
  const upstreams = await startUpstreams(S.delays);
  const anthropic = await startAnthropicUpstream();
  const redis = await startRedis();
  const db = await freshDatabase();
  const gw = await startGateway(upstreams, redis.url, db, "gateway", {}, anthropic.port);
  log(
    `gateway pid ${gw.child.proc.pid} healthy on ${gw.base} (database: ${db ? db.name : "embedded Postgres"}, LOG_LEVEL=${S.gatewayLogLevel})`,
  );
  const { key } = await apiKeyWithCredit(gw);
  const u0 = upstreams[0]!;
  return {
    upstreams,
    redis,
    db,
    gw,
    key,
    loop: new LoopMonitor(gw.child.proc.pid, gw.loopFile),
    baselineLoop: new LoopMonitor(u0.baseline.proc.pid!, u0.loopFile),
    anthropic: { pid: anthropic.child.proc.pid, port: anthropic.port },
  };
}

/** The three targets of one stand-in delay; `stream` asks each for a streamed answer (with the usage chunk). */
export function targetsFor(s: Setup, d: number, stream = false): Record<"direct" | "baseline" | "gateway", Target> {
  const standinAuth = { "content-type": "application/json", authorization: `Bearer ${STANDIN_KEY}` };
  const u = s.upstreams[d]!;
  const upstreamBody = stream ? directStreamBody : directBody;
  return {
    direct: { name: "direct", url: `http://127.0.0.1:${u.standinPort}/v1/chat/completions`, headers: standinAuth, body: upstreamBody },
    baseline: { name: "baseline", url: `http://127.0.0.1:${u.baselinePort}/v1/chat/completions`, headers: standinAuth, body: upstreamBody },
    gateway: {
      name: "gateway",
      url: `${s.gw.base}/v1/chat/completions`,
      headers: { "content-type": "application/json", authorization: `Bearer ${s.key}` },
      body: stream ? gatewayStreamBody(d) : gatewayBody(d),
    },
  };
}

/** Concurrency 1 per delay: interleaved sequential requests; one DelayResult per delay, throughput still empty. */
export async function latencyPhase(s: Setup, count: GatewayCount): Promise<DelayResult[]> {
  const results: DelayResult[] = [];
  for (const d of S.delays) {
    const t = targetsFor(s, d);
    const n = d === 0 ? S.latN : S.latNSlow;
    const warm = d === 0 ? S.latWarmup : Math.ceil(S.latWarmup / 5);
    log(`concurrency 1, stand-in ${d} ms: ${warm} warm-up + ${n} requests per target`);
    await s.loop.reset();
    const { stats: lat, warmOk } = await sequentialLatency([t.direct, t.baseline, t.gateway], warm, n);
    const stall = await s.loop.read(`fetch loop c1, ${d} ms`);
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
      stalls: stall ? [stall] : [],
    });
  }
  return results;
}

/**
 * wrk at concurrency 1 on one persistent connection against the 0 ms stand-in: back-to-back requests, so work
 * the gateway leaves behind an answer (the settle, the access-log line, timers) meets the next request.
 */
export async function wrkPhase(s: Setup, dir: string, count: GatewayCount): Promise<WrkFigures | undefined> {
  if (!wrkPath()) {
    log("wrk is not installed (bash scripts/setup.sh installs it): skipping the persistent-connection run");
    return undefined;
  }
  const t = targetsFor(s, 0);
  log(`wrk concurrency 1, stand-in 0 ms: ${S.wrkRounds} round(s) × ${S.wrkS} s per target`);
  await s.loop.reset();
  await s.baselineLoop.reset();
  const runs = await wrkRotating(dir, [t.direct, t.baseline, t.gateway], S.wrkS, S.wrkRounds);
  const stall = await s.loop.read("wrk c1, 0 ms");
  const baselineStall = await s.baselineLoop.read("wrk c1, 0 ms — **baseline proxy**");
  for (const r of runs.gateway!) ((count.ok += r.requests), (count.extraInFlight += 1));
  const m = (name: string, pick: (r: WrkResult) => number) => mean(runs[name]!.map(pick));
  return {
    runs,
    addedP50Ms: m("gateway", (r) => r.p50Ms) - m("direct", (r) => r.p50Ms),
    addedP99Ms: m("gateway", (r) => r.p99Ms) - m("direct", (r) => r.p99Ms),
    addedP999Ms: m("gateway", (r) => r.p999Ms) - m("direct", (r) => r.p999Ms),
    baselineAddedP50Ms: m("baseline", (r) => r.p50Ms) - m("direct", (r) => r.p50Ms),
    baselineAddedP99Ms: m("baseline", (r) => r.p99Ms) - m("direct", (r) => r.p99Ms),
    baselineAddedP999Ms: m("baseline", (r) => r.p999Ms) - m("direct", (r) => r.p999Ms),
    failures: Object.values(runs)
      .flat()
      .reduce((a, r) => a + r.failures, 0),
    stall,
    baselineStall,
  };
}

/**
 * Streamed answers: first byte at concurrency 1 from the 0 ms stand-in (interleaved fetch loop), then streams per
 * second at concurrency N against each stand-in, gateway and baseline alternating.
 */
export async function streamPhase(s: Setup, loadgen: string[], count: GatewayCount): Promise<StreamResult> {
  const t = targetsFor(s, 0, true);
  log(`streams, stand-in 0 ms: first byte at concurrency 1, ${S.streamN} per target`);
  await s.loop.reset();
  const ttfb = await streamLatency([t.direct, t.baseline, t.gateway], Math.ceil(S.latWarmup / 3), S.streamN);
  const ttfbStall = await s.loop.read("stream first byte c1, 0 ms");
  count.ok += Math.ceil(S.latWarmup / 3) + ttfb.gateway!.n - ttfb.gateway!.failures;
  log(
    `  first byte: direct p50 ${f3(ttfb.direct!.ttfbP50)} p99 ${f3(ttfb.direct!.ttfbP99)} · gateway p50 ${f3(ttfb.gateway!.ttfbP50)} p99 ${f3(ttfb.gateway!.ttfbP99)}`,
  );

  const rates: Record<number, StreamRate> = {};
  const stalls: LoopStall[] = ttfbStall ? [ttfbStall] : [];
  for (const d of S.delays) rates[d] = await streamRate(s, d, loadgen, count, stalls);
  return {
    ttfb,
    addedTtfbP50Ms: ttfb.gateway!.ttfbP50 - ttfb.direct!.ttfbP50,
    addedTtfbP99Ms: ttfb.gateway!.ttfbP99 - ttfb.direct!.ttfbP99,
    baselineAddedTtfbP50Ms: ttfb.baseline!.ttfbP50 - ttfb.direct!.ttfbP50,
    baselineAddedTtfbP99Ms: ttfb.baseline!.ttfbP99 - ttfb.direct!.ttfbP99,
    rates,
    failures: Object.values(ttfb).reduce((a, x) => a + x.failures, 0) + Object.values(rates).reduce((a, x) => a + x.failures, 0),
    stalls,
  };
}

/** Streams per second at concurrency N against the stand-in of one delay, gateway and baseline alternating. */
async function streamRate(s: Setup, d: number, loadgen: string[], count: GatewayCount, stalls: LoopStall[]): Promise<StreamRate> {
  const t = targetsFor(s, d, true);
  const u = s.upstreams[d]!;
  const pids = { gateway: s.gw.child.proc.pid, baseline: u.baseline.proc.pid, direct: u.standin.proc.pid };
  const watch = (x: Target): Watch => ({ target: pids[x.name], standin: u.standin.proc.pid, redis: s.redis.pid });
  const runs: { gateway: LoadResult[]; baseline: LoadResult[] } = { gateway: [], baseline: [] };
  log(`streams, stand-in ${d} ms: concurrency ${S.connections}`);
  for (const x of [t.baseline, t.gateway]) {
    if (S.warmupS === 0) break;
    const w = await autocannon(loadgen, x, S.connections, S.warmupS, watch(x));
    if (x.name === "gateway") ((count.ok += w.ok2xx), (count.extraInFlight += S.connections));
  }
  for (let round = 0; round < S.rounds; round++) {
    for (const x of round % 2 === 0 ? [t.baseline, t.gateway] : [t.gateway, t.baseline]) {
      if (x.name === "gateway") await s.loop.reset();
      const res = await autocannon(loadgen, x, S.connections, S.durationS, watch(x));
      if (x.name === "gateway") {
        const st = await s.loop.read(`streams c${S.connections}, ${d} ms, round ${round + 1}`);
        if (st) stalls.push(st);
        ((count.ok += res.ok2xx), (count.extraInFlight += S.connections));
      }
      runs[x.name as "gateway" | "baseline"].push(res);
      log(
        `  streams ${d} ms round ${round + 1} ${x.name}: ${f0(res.rps)} streams/s, non-2xx ${res.non2xx}, errors ${res.errors}; ${f0(res.cpuUsPerRequest)} µs CPU/stream`,
      );
    }
  }
  const gatewayRps = mean(runs.gateway.map((x) => x.rps));
  const baselineRps = mean(runs.baseline.map((x) => x.rps));
  const failures = [...runs.gateway, ...runs.baseline].reduce((a, x) => a + x.non2xx + x.errors + x.timeouts, 0);
  return { runs, gatewayRps, baselineRps, ratio: gatewayRps / baselineRps, failures };
}

/** Concurrency N per delay: warm-up each, then alternate baseline / gateway per round, then the stand-in alone. */
export async function throughputPhase(s: Setup, results: DelayResult[], loadgen: string[], count: GatewayCount): Promise<void> {
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
        if (x.name === "gateway") ((count.ok += w.ok2xx), (count.extraInFlight += S.connections));
      }
    }
    for (let round = 0; round < S.rounds; round++) {
      const order = round % 2 === 0 ? [t.baseline, t.gateway] : [t.gateway, t.baseline];
      for (const x of order) {
        const monitor = x.name === "gateway" ? s.loop : r.delayMs === 0 ? s.baselineLoop : undefined;
        await monitor?.reset();
        const stats0 = x.name === "gateway" ? await redisCommandStats(s.redis.url) : undefined;
        const res = await load(x, S.durationS, watch(x));
        if (stats0) res.scriptUsPerRequest = scriptDelta(stats0, await redisCommandStats(s.redis.url)).usec / Math.max(1, res.ok2xx);
        const st = await monitor?.read(
          `JSON c${S.connections}, ${r.delayMs} ms, round ${round + 1}${x.name === "baseline" ? " — **baseline proxy**" : ""}`,
        );
        if (st) r.stalls.push(st);
        r.throughput[x.name].push(res);
        if (x.name === "gateway") ((count.ok += res.ok2xx), (count.extraInFlight += S.connections));
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
    r.non2xx = [...r.throughput.gateway, ...r.throughput.baseline, ...r.throughput.direct].reduce(
      (a, x) => a + x.non2xx + x.errors + x.timeouts,
      0,
    );
  }
}
