/**
 * The runner's side of the gateway's event-loop delay monitor (bench/loopStall.preload.ts): a SIGUSR2 makes the
 * gateway write the histogram since the last signal and reset it, so each phase gets its own.
 */
import { existsSync, readFileSync } from "node:fs";
import { sleep } from "./settings.ts";

/** How late the gateway's event loop ran during one phase: percentiles and a histogram (share of samples). */
export interface LoopStall {
  phase: string;
  windowS: number;
  samples: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  p999Ms: number;
  maxMs: number;
  /** Share of samples, %, by delay: < 0.5 ms, 0.5–1, 1–2, 2–5, 5–10, ≥ 10 ms. */
  buckets: Record<string, number>;
}

/** The edges of the histogram's buckets, ms (the preload's EDGES_MS). */
export const BUCKET_EDGES = [0.5, 1, 2, 5, 10];
export const BUCKET_LABELS = ["< 0.5", "0.5–1", "1–2", "2–5", "5–10", "≥ 10"];

interface Dump {
  seq: number;
  windowMs: number;
  count: number;
  maxMs: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  p999Ms: number;
  /** Share of samples (%) below each of BUCKET_EDGES. */
  below: number[];
}

/** The gateway's loop monitor, read and reset by signal; does nothing when the gateway runs without it. */
export class LoopMonitor {
  private seq = 0;
  constructor(
    private readonly pid: number,
    private readonly file: string,
  ) {}

  private async dump(): Promise<Dump | undefined> {
    try {
      process.kill(this.pid, "SIGUSR2");
    } catch {
      return undefined;
    }
    const deadline = Date.now() + 5_000;
    while (Date.now() < deadline) {
      if (existsSync(this.file)) {
        const d = JSON.parse(readFileSync(this.file, "utf8")) as Dump;
        if (d.seq > this.seq) {
          this.seq = d.seq;
          return d;
        }
      }
      await sleep(20);
    }
    return undefined;
  }

  /** Starts a phase: drops what the histogram collected so far. */
  async reset(): Promise<void> {
    await this.dump();
  }

  /** Ends a phase: its histogram. */
  async read(phase: string): Promise<LoopStall | undefined> {
    const d = await this.dump();
    if (!d || d.count === 0) return undefined;
    const cum = [0, ...d.below, 100];
    const buckets = Object.fromEntries(BUCKET_LABELS.map((l, i) => [l, Math.max(0, cum[i + 1]! - cum[i]!)]));
    return {
      phase,
      windowS: d.windowMs / 1000,
      samples: d.count,
      p50Ms: d.p50Ms,
      p90Ms: d.p90Ms,
      p99Ms: d.p99Ms,
      p999Ms: d.p999Ms,
      maxMs: d.maxMs,
      buckets,
    };
  }
}
