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
  /** Hard limit for the whole run; the watchdog cleans up and exits non-zero after it. */
  watchdogMs: 15 * 60_000,
  pgAdminUrl: process.env.BENCH_PG_URL || "postgres://postgres@127.0.0.1:5432/postgres",
  grantUsd: "1000000",
  maxTokens: 16,
};

/** What the gateway should reach: throughput ratio against the baseline, added latency at concurrency 1. */
export const TARGETS = { ratio: 0.4, addedP50Ms: 0.5, addedP99Ms: 1.5 };

const MESSAGES = [{ role: "user", content: "Say hello to the benchmark." }];
/** The request body straight to a stand-in (and through the baseline proxy). */
export const directBody = JSON.stringify({ model: "echo", messages: MESSAGES, max_tokens: S.maxTokens });
/** The same request through the gateway, to the catalog model of the stand-in with this delay. */
export const gatewayBody = (delay: number) => JSON.stringify({ model: `standin${delay}/echo`, messages: MESSAGES, max_tokens: S.maxTokens });

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Progress on stderr; stdout carries only the report. */
export const log = (msg: string) => process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
