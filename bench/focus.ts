/**
 * A short, focused measurement for A/B work on one figure, not a report: the same set-up as run.ts, then only
 * the phases named in BENCH_FOCUS (comma list: json, stream, ttfb, wrk), each gateway run beside a baseline run.
 *
 *   BENCH_FOCUS=json bun bench/focus.ts                  # concurrency 32 JSON: req/s, CPU µs per request
 *   BENCH_FOCUS=json BENCH_PROFILE=1 bun bench/focus.ts  # the same with the gateway under the CPU profiler
 *   BENCH_FOCUS=wrk,stream bun bench/focus.ts
 *   BENCH_FOCUS=stream,ttfb bun bench/focus.ts           # streams/s at c32, then the streamed first byte at c1
 *   BENCH_FOCUS=stream,stream20 bun bench/focus.ts       # streams/s at c32, 0 ms stand-in then the paced 20 ms one
 *   BENCH_FOCUS=doors bun bench/focus.ts                 # CPU µs/request of /v1/responses and /v1/messages vs
 *                                                        # /v1/chat/completions, per provider type (JSON, stream)
 *   BENCH_FOCUS=doors BENCH_DOORS_KINDS=stream BENCH_DOORS_PROVIDERS=openai-type bun bench/focus.ts   # a part of it
 *
 * BENCH_DURATION_S (default 6) and BENCH_ROUNDS (default 2; 5 for doors) size the runs. doors: every target at a fixed
 * BENCH_DOORS_RATE (default 1500 req/s; 0 = saturated), the ratio the median of the rounds' ratios (docs/benchmarks.md).
 * Prints one line per run on stderr.
 */
import { copyFileSync, existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import {
  autocannon,
  cpuSeconds,
  descendants,
  jsThreadCpuSeconds,
  redisCommandStats,
  rssKb,
  scriptDelta,
  type Target,
  type Watch,
} from "./measure.ts";
import { setUp, targetsFor } from "./phases.ts";
import { apiKeyWithCredit, CLAUDE_MODEL, openWorkDir, runThenClean, stopChild } from "./processes.ts";
import { f0, f2, f3 } from "./report.ts";
import { log, MESSAGES, PROFILE, RESULTS, S } from "./settings.ts";
import { streamLatency, wrkRotating } from "./tail.ts";

const FOCUS = (process.env.BENCH_FOCUS || "json").split(",").map((x) => x.trim());
const DURATION_S = Number(process.env.BENCH_DURATION_S || 6);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 2);
// doors only: which halves (json, stream) and which provider types (openai-type, anthropic-type) to run.
const DOORS_KINDS = (process.env.BENCH_DOORS_KINDS || "json,stream").split(",");
const DOORS_PROVIDERS = (process.env.BENCH_DOORS_PROVIDERS || "openai-type,anthropic-type").split(",");
// and which targets (labels as printed: chat, responses, responses+store, …); all by default.
const DOORS_ONLY = process.env.BENCH_DOORS_ONLY?.split(",");
// doors: rounds of every target, the ratio a median of theirs (BENCH_ROUNDS when set).
const DOORS_ROUNDS = Number(process.env.BENCH_ROUNDS || 5);
const DOORS_WARM_S = Number(process.env.BENCH_DOORS_WARM_S || 2);
const DOORS_RATE = Number(process.env.BENCH_DOORS_RATE ?? 1500) || undefined;

async function main(): Promise<void> {
  const dir = openWorkDir();
  const s = await setUp();
  const node = Bun.which("node");
  const loadgen = node ? [node] : [process.execPath];
  // The processes behind a target of the stand-in with delay `d` (its own baseline proxy and stand-in).
  const pidsOf = (d: number) => ({
    gateway: s.gw.child.proc.pid,
    baseline: s.upstreams[d]!.baseline.proc.pid,
    direct: s.upstreams[d]!.standin.proc.pid,
  });
  const watchAt =
    (d: number) =>
    (x: Target): Watch => ({ target: pidsOf(d)[x.name], standin: s.upstreams[d]!.standin.proc.pid, redis: s.redis.pid });
  const watch = watchAt(0);
  const pair = async (what: string, t: Record<"baseline" | "gateway", Target>, d = 0) => {
    const watch = watchAt(d);
    const c = S.connections; // BENCH_CONNECTIONS, 32 unless set (the json and stream phases' "c32")
    await autocannon(loadgen, t.gateway, c, 2, watch(t.gateway)); // warm-up
    const sums = { gateway: 0, baseline: 0 };
    for (let round = 0; round < ROUNDS; round++) {
      for (const x of round % 2 ? [t.gateway, t.baseline] : [t.baseline, t.gateway]) {
        const stats = x.name === "gateway" ? await redisCommandStats(s.redis.url) : {};
        const r = await autocannon(loadgen, x, c, DURATION_S, watch(x));
        if (x.name === "gateway") logScripts(stats, await redisCommandStats(s.redis.url), r.total);
        sums[x.name as "gateway" | "baseline"] += r.rps / ROUNDS;
        log(
          `${what} ${x.name}: ${f0(r.rps)} req/s · p99 ${f0(r.latencyP99)} ms · ${f0(r.cpuUsPerRequest)} µs CPU/request (serving ${f0(r.servingUsPerRequest)}) · redis ${f0(r.redisUsPerRequest)} µs · ` +
            `machine ${f0(r.machineUsPerRequest)} µs · cores ${x.name} ${f2(r.cores.target)} redis ${f2(r.cores.redis)} pg ${f2(r.cores.postgres)} ` +
            `machine ${f2(r.cores.machine)} · non-2xx ${r.non2xx + r.errors}`,
        );
      }
    }
    log(`${what} ratio ${f2(sums.gateway / sums.baseline)}`);
  };
  // The same conversation through each front door, c32, all of a provider's targets alternating per round: the
  // gateway's CPU per request, each door against /v1/chat/completions to the same provider (issue 20: within 15 %).
  const doors = async (stream: boolean) => {
    const chat = targetsFor(s, 0, stream).gateway;
    const input = MESSAGES.map((m) => ({ role: m.role, content: m.content }));
    const on = (path: string, body: Record<string, unknown>): Target => ({
      ...chat,
      url: chat.url.replace("/v1/chat/completions", path),
      body: JSON.stringify({ ...body, ...(stream ? { stream } : {}) }),
    });
    const chatOn = (model: string) =>
      on("/v1/chat/completions", {
        model,
        messages: MESSAGES,
        max_tokens: S.maxTokens,
        ...(stream ? { stream_options: { include_usage: true } } : {}),
      });
    const responses = (model: string, store: boolean) => on("/v1/responses", { model, input, max_output_tokens: S.maxTokens, store });
    const messages = (model: string) => on("/v1/messages", { model, messages: MESSAGES, max_tokens: S.maxTokens });
    const providers: [string, number, [string, Target][]][] = [
      [
        "openai-type",
        s.upstreams[0]!.standin.proc.pid!,
        [
          ["chat", chatOn("standin0/echo")],
          ["responses", responses("standin0/echo", false)],
          ["responses+store", responses("standin0/echo", true)],
          ["messages (translated)", messages("standin0/echo")],
        ],
      ],
      [
        "anthropic-type",
        s.anthropic.pid,
        [
          ["chat", chatOn(CLAUDE_MODEL)],
          ["responses", responses(CLAUDE_MODEL, false)],
          ["messages (native)", messages(CLAUDE_MODEL)],
        ],
      ],
    ];
    const kind = stream ? "stream" : "json";
    for (let [provider, standin, runs] of providers) {
      if (!DOORS_PROVIDERS.includes(provider)) continue;
      if (DOORS_ONLY) runs = runs.filter(([label]) => DOORS_ONLY.includes(label));
      const watchOn = (t: Target): Watch => ({ ...watch(t), standin });
      // Each round runs every target once (order reversed every other round) and gives each door its ratio to
      // that round's chat run; the figure is the median of the rounds' ratios. A run's CPU per request moves by
      // ±10 % with what else the 2 cores do; a ratio of runs a few seconds apart cancels the slow drift, and the
      // median drops a round a burst hit (a mean of 2 rounds moved the ratio by ±0.15 between identical runs).
      const cpu: Record<string, number[]> = {};
      for (const [, t] of runs) await autocannon(loadgen, t, 32, DOORS_WARM_S, watchOn(t), DOORS_RATE); // warm-up
      for (let round = 0; round < DOORS_ROUNDS; round++) {
        for (const [label, t] of round % 2 ? [...runs].reverse() : runs) {
          const js0 = jsThreadCpuSeconds(s.gw.child.proc.pid);
          const r = await autocannon(loadgen, t, 32, DURATION_S, watchOn(t), DOORS_RATE);
          const jsUs = ((jsThreadCpuSeconds(s.gw.child.proc.pid) - js0) / Math.max(1, r.ok2xx)) * 1e6;
          (cpu[label] ??= []).push(r.cpuUsPerRequest);
          log(
            `doors ${kind} ${provider} c32 ${label}: ${f0(r.rps)} req/s · ${f0(r.cpuUsPerRequest)} µs CPU/request ` +
              `(JS thread ${f0(jsUs)}) · non-2xx ${r.non2xx + r.errors}`,
          );
        }
      }
      const chat = cpu.chat;
      for (const [label] of chat === undefined ? [] : runs.slice(1)) {
        const ratios = cpu[label]!.map((x, i) => x / chat![i]!).sort((a, b) => a - b);
        const ratio = median(ratios);
        const [door, base] = [median(cpu[label]!), median(chat!)];
        log(
          `doors ${kind} ${provider}: ${label} ${f0(door)} µs vs chat ${f0(base)} µs CPU/request (medians of ${DOORS_ROUNDS} rounds); ` +
            `ratio ${f2(ratio)}× (rounds ${f2(ratios[0]!)}–${f2(ratios[ratios.length - 1]!)}; target ≤ 1.15× ${ratio <= 1.15 ? "met" : "MISSED"})`,
        );
      }
    }
  };
  // The same JSON load from one wallet and spread over BENCH_WALLETS wallets (default 16; real traffic is many
  // tenants: the settle batches split by wallet), rounds alternating: the gateway's and Redis's CPU per request.
  const wallets = async () => {
    const n = Number(process.env.BENCH_WALLETS || 16);
    const keys: string[] = [];
    for (let i = 0; i < n; i++) keys.push((await apiKeyWithCredit(s.gw)).key);
    const one = targetsFor(s, 0).gateway;
    const per = Math.max(1, Math.round(32 / n));
    const run = async (label: string, ks: string[], conns: number) => {
      const gwPid = s.gw.child.proc.pid!;
      const before = { gw: cpuSeconds(gwPid), redis: cpuSeconds(s.redis.pid) };
      const stats0 = await redisCommandStats(s.redis.url);
      const rs = await Promise.all(
        ks.map((key) =>
          autocannon(loadgen, { ...one, headers: { ...one.headers, authorization: `Bearer ${key}` } }, conns, DURATION_S, {
            target: gwPid,
            standin: 0,
            redis: 0,
          }),
        ),
      );
      const ok = rs.reduce((a, r) => a + r.ok2xx, 0);
      const bad = rs.reduce((a, r) => a + r.non2xx + r.errors, 0);
      const stats1 = await redisCommandStats(s.redis.url);
      const scripts = scriptDelta(stats0, stats1);
      const us = (a: number, b: number) => ((b - a) / Math.max(1, ok)) * 1e6;
      log(
        `json c32 ${label}: ${f0(rs.reduce((a, r) => a + r.rps, 0))} req/s · gateway ${f0(us(before.gw, cpuSeconds(gwPid)))} µs CPU/request · ` +
          `redis ${f0(us(before.redis, cpuSeconds(s.redis.pid)))} µs CPU/request (scripts ${f2(scripts.usec / Math.max(1, ok))} µs, ` +
          `${f2(scripts.calls / Math.max(1, ok))} calls/request) · non-2xx ${bad}`,
      );
    };
    await run("warm-up", [s.key], 32);
    for (let round = 0; round < ROUNDS; round++) {
      const order: [string, string[], number][] = [
        ["1 wallet", [s.key], 32],
        [`${n} wallets`, keys, per],
      ];
      for (const [label, ks, conns] of round % 2 ? order.reverse() : order) await run(label, ks, conns);
    }
  };
  for (const f of FOCUS) {
    if (f === "wallets") await wallets();
    else if (f === "doors") {
      if (DOORS_KINDS.includes("json")) await doors(false);
      if (DOORS_KINDS.includes("stream")) await doors(true);
    } else if (f === "json") await pair(`json c${S.connections}`, targetsFor(s, 0));
    else if (f === "stream") await pair(`stream c${S.connections}`, targetsFor(s, 0, true));
    // The same against the paced (20 ms) stand-in: latency-bound, what a client waiting on a model sees.
    else if (f === "stream20") await pair("stream c32 20 ms", targetsFor(s, 20, true), 20);
    else if (f === "ttfb") {
      // The streamed first byte at concurrency 1, direct / baseline / gateway interleaved (BENCH_STREAM_N each).
      const t = targetsFor(s, 0, true);
      for (let round = 0; round < ROUNDS; round++) {
        const r = await streamLatency([t.direct, t.baseline, t.gateway], 100, S.streamN);
        const d = r.direct!;
        for (const x of [r.baseline!, r.gateway!]) {
          const name = x === r.gateway ? "gateway" : "baseline";
          log(
            `ttfb c1 round ${round + 1} ${name}: p50 ${f3(x.ttfbP50)} p99 ${f3(x.ttfbP99)} · added p50 ${f3(x.ttfbP50 - d.ttfbP50)} ` +
              `p99 ${f3(x.ttfbP99 - d.ttfbP99)} · direct p50 ${f3(d.ttfbP50)} p99 ${f3(d.ttfbP99)} · failures ${x.failures}`,
          );
        }
      }
    } else if (f === "wrk") {
      const t = targetsFor(s, 0);
      const w = await wrkRotating(dir, [t.direct, t.baseline, t.gateway], DURATION_S, ROUNDS);
      for (const [name, runs] of Object.entries(w)) {
        for (const r of runs) log(`wrk c1 ${name}: ${f0(r.rps)} req/s p50 ${f3(r.p50Ms)} p99 ${f3(r.p99Ms)} max ${f3(r.maxMs)}`);
      }
    } else if (f === "wrk-gateway" || f === "wrk-baseline") {
      // One target alone, for tracing it from outside (perf sched, strace) while nothing else runs.
      const t = targetsFor(s, 0)[f === "wrk-gateway" ? "gateway" : "baseline"];
      log(`${f} starts`);
      const w = await wrkRotating(dir, [t], DURATION_S, 1);
      for (const r of w[t.name] ?? []) log(`${f}: ${f0(r.rps)} req/s p50 ${f3(r.p50Ms)} p99 ${f3(r.p99Ms)} max ${f3(r.maxMs)}`);
    } else
      throw new Error(`BENCH_FOCUS: unknown phase ${f} (json, wallets, stream, stream20, ttfb, wrk, wrk-gateway, wrk-baseline, doors)`);
  }
  const rss = rssKb(s.gw.child.proc.pid);
  log(`gateway RSS now ${f0(rss.rssKb / 1024)} MiB, peak ${f0(rss.hwmKb / 1024)} MiB`);
  // Its background process (flusher, sweeper, repairs; with no database URL, PGlite too): issue 31.
  for (const pid of descendants(s.gw.child.proc.pid!)) {
    const r = rssKb(pid);
    if (r.rssKb > 0) log(`gateway child ${pid} RSS now ${f0(r.rssKb / 1024)} MiB, peak ${f0(r.hwmKb / 1024)} MiB`);
  }
  if (PROFILE) {
    await stopChild(s.gw.child);
    for (const f of existsSync(s.gw.profileDir) ? readdirSync(s.gw.profileDir) : []) {
      const dest = join(RESULTS, `profile-focus-${f}`);
      copyFileSync(join(s.gw.profileDir, f), dest);
      log(`profile: ${dest}`);
    }
  }
}

await runThenClean(main);

/** The middle value (the mean of the two middle ones for an even count). */
function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** Script calls and their Redis time per request over one gateway run (INFO commandstats before and after). */
function logScripts(before: Record<string, { calls: number; usec: number }>, after: typeof before, requests: number): void {
  const { calls, usec } = scriptDelta(before, after);
  log(
    `  scripts: ${(calls / requests).toFixed(3)} calls/request · ${(usec / requests).toFixed(1)} µs/request in Redis · ${(usec / Math.max(1, calls)).toFixed(1)} µs/call`,
  );
}
