/**
 * The benchmark's settings, read once from the environment (bench/README.md lists the knobs), and the request
 * every target is sent.
 */
import { join, resolve } from "node:path";

export const ROOT = resolve(import.meta.dir, "..");
export const RESULTS = join(ROOT, "bench", "results");
export const QUICK = process.env.BENCH_QUICK === "1";
/** BENCH_PROFILE=1: run the gateway under Bun's CPU profiler; the profile lands in bench/results/profile-*. */
export const PROFILE = process.env.BENCH_PROFILE === "1";
/** BENCH_DRY=1: start everything, check each target answers once, stop; no measurement, no results written. */
export const DRY = process.env.BENCH_DRY === "1";

function envInt(name: string, fallback: number, min: number, max: number): number {
  const raw = process.env[name];
  if (!raw) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${name} must be a whole number in [${min}, ${max}]`);
  return n;
}

/** How long and how hard each phase runs (QUICK shortens them for a smoke run). */
export const S = {
  delays: [0, 20],
  connections: envInt("BENCH_CONNECTIONS", 32, 1, 1024),
  durationS: envInt("BENCH_DURATION_S", QUICK ? 3 : 10, 1, 120),
  warmupS: envInt("BENCH_WARMUP_S", QUICK ? 1 : 3, 0, 60),
  rounds: envInt("BENCH_ROUNDS", QUICK ? 1 : 2, 1, 10),
  latWarmup: QUICK ? 50 : 300,
  latN: envInt("BENCH_LAT_N", QUICK ? 300 : 3000, 10, 100_000),
  latNSlow: envInt("BENCH_LAT_N_SLOW", QUICK ? 60 : 600, 10, 10_000),
  /** wrk at concurrency 1 on one persistent connection: seconds per target per round (0 ms stand-in). */
  wrkS: envInt("BENCH_WRK_S", QUICK ? 2 : 5, 1, 60),
  wrkRounds: envInt("BENCH_WRK_ROUNDS", QUICK ? 1 : 3, 1, 10),
  /** Streams at concurrency 1 for time to first byte, per target (0 ms stand-in). */
  streamN: envInt("BENCH_STREAM_N", QUICK ? 200 : 2000, 10, 100_000),
  /** The gateway's event-loop delay monitor resolution, ms (bench/loopStall.preload.ts). */
  loopResolutionMs: envInt("BENCH_LOOP_RESOLUTION_MS", 1, 1, 100),
  /** The gateway's LOG_LEVEL: info (the default a deployment runs) writes the access-log line per request. */
  gatewayLogLevel: process.env.BENCH_LOG_LEVEL || "info",
  /** Hard limit for the whole run; the watchdog cleans up and exits non-zero after it. */
  watchdogMs: 15 * 60_000,
  pgAdminUrl: process.env.BENCH_PG_URL || "postgres://postgres@127.0.0.1:5432/postgres",
  grantUsd: "1000000",
  maxTokens: 16,
};

/** What the gateway should reach: throughput ratio against the baseline, added latency at concurrency 1. */
export const TARGETS = { ratio: 0.4, addedP50Ms: 0.5, addedP99Ms: 1.5 };

/**
 * Issue 14's table (0 ms stand-in): the figures as the issue measured them ("now") and the targets. The report
 * prints this run's figure beside both.
 */
export const ISSUE14 = {
  // Issue 23's table ("two runs now" and its targets); the rows it does not name keep issue 14's.
  ratio: { now: "0.34, 0.33", target: 0.5 },
  wrkAddedP99Ms: { now: "4.1 ms, 2.7 ms", target: 1.5 },
  fetchAddedP99Ms: { now: "1.4 ms", target: 0.8 },
  streamTtfbAddedP50Ms: { now: "0.82 ms, 0.58 ms", target: 0.4 },
  streamTtfbAddedP99Ms: { now: "0.80 ms", target: 0.8 },
  streamRatio: { now: "0.78, 0.88", target: 0.9 },
  rssAfterMiB: { now: "161 MB, 176 MB", target: 120 },
  rssPeakMiB: { now: "~150 MB", target: 160 },
  redisUsPerCharge: { now: "~52 µs", target: 30 },
};

/** The conversation every benchmark request sends (chat messages; the Responses door sends them as input items). */
export const MESSAGES = [{ role: "user", content: "Say hello to the benchmark." }];
/** The request body straight to a stand-in (and through the baseline proxy). */
export const directBody = JSON.stringify({ model: "echo", messages: MESSAGES, max_tokens: S.maxTokens });
/** The same request through the gateway, to the catalog model of the stand-in with this delay. */
export const gatewayBody = (delay: number) =>
  JSON.stringify({ model: `standin${delay}/echo`, messages: MESSAGES, max_tokens: S.maxTokens });
/** A streamed request straight to a stand-in: with include_usage, as the gateway asks upstream, so the bytes match. */
export const directStreamBody = JSON.stringify({
  model: "echo",
  messages: MESSAGES,
  max_tokens: S.maxTokens,
  stream: true,
  stream_options: { include_usage: true },
});
/** The same streamed request through the gateway. */
export const gatewayStreamBody = (delay: number) =>
  JSON.stringify({
    model: `standin${delay}/echo`,
    messages: MESSAGES,
    max_tokens: S.maxTokens,
    stream: true,
    stream_options: { include_usage: true },
  });

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Progress on stderr; stdout carries only the report. */
export const log = (msg: string) => process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
