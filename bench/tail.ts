/**
 * The tail at concurrency 1, measured two ways the sequential fetch loop cannot: wrk on one persistent connection
 * (back-to-back requests, microsecond percentiles; what load testers run), and time to first byte of streamed
 * answers. Each function measures; none starts or stops a process.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Target } from "./measure.ts";
import { log } from "./settings.ts";

/** One wrk run, µs as wrk measured (converted to ms for the report). */
export interface WrkResult {
  requests: number;
  durationS: number;
  rps: number;
  /** Answers with status ≥ 400 plus socket errors and timeouts. */
  failures: number;
  meanMs: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  p999Ms: number;
  maxMs: number;
}

/** Where wrk comes from: Debian's `wrk` package (scripts/setup.sh installs it). */
export function wrkPath(): string | null {
  return Bun.which("wrk");
}

const luaString = (s: string) => `"${s.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;

/** The Lua script that makes wrk POST the target's body and print its figures as one JSON line. */
function wrkScript(dir: string, t: Target): string {
  const file = join(dir, `wrk-${t.name}.lua`);
  const headers = Object.entries(t.headers)
    .map(([k, v]) => `wrk.headers[${luaString(k)}] = ${luaString(v)}`)
    .join("\n");
  writeFileSync(
    file,
    `wrk.method = "POST"
wrk.body = ${luaString(t.body)}
${headers}
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRKJSON {"requests":%d,"duration_us":%d,"failures":%d,"mean_us":%f,"max_us":%d,"p50":%d,"p90":%d,"p99":%d,"p999":%d}\\n',
    summary.requests, summary.duration, e.status + e.connect + e.read + e.write + e.timeout,
    latency.mean, latency.max, latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9)))
end
`,
  );
  return file;
}

/** wrk -t1 -c<connections> for `durationS` seconds against one target. */
export async function wrk(dir: string, t: Target, durationS: number, connections = 1): Promise<WrkResult> {
  const bin = wrkPath();
  if (!bin) throw new Error("wrk is not installed (apt-get install -y wrk, or bash scripts/setup.sh)");
  const p = Bun.spawn([bin, "-t1", `-c${connections}`, `-d${durationS}s`, "--timeout", "10s", "-s", wrkScript(dir, t), t.url], {
    stdout: "pipe",
    stderr: "pipe",
    stdin: "ignore",
  });
  const killer = setTimeout(() => p.kill("SIGKILL"), (durationS + 30) * 1000);
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  clearTimeout(killer);
  const line = out.split("\n").find((l) => l.startsWith("WRKJSON "));
  if (code !== 0 || !line) throw new Error(`wrk failed (${code}): ${err.slice(0, 1000) || out.slice(0, 1000)}`);
  const r = JSON.parse(line.slice(8)) as Record<string, number>;
  const ms = (us: number) => us / 1000;
  const durationS_ = r.duration_us! / 1e6;
  return {
    requests: r.requests!,
    durationS: durationS_,
    rps: r.requests! / durationS_,
    failures: r.failures!,
    meanMs: ms(r.mean_us!),
    p50Ms: ms(r.p50!),
    p90Ms: ms(r.p90!),
    p99Ms: ms(r.p99!),
    p999Ms: ms(r.p999!),
    maxMs: ms(r.max_us!),
  };
}

/**
 * wrk at concurrency 1 against every target, `rounds` times in rotating order (so drift on the shared machine
 * hits all alike); one list of runs per target.
 */
export async function wrkRotating(dir: string, targets: Target[], durationS: number, rounds: number): Promise<Record<string, WrkResult[]>> {
  const out: Record<string, WrkResult[]> = {};
  for (const t of targets) out[t.name] = [];
  for (let round = 0; round < rounds; round++) {
    for (let j = 0; j < targets.length; j++) {
      const t = targets[(round + j) % targets.length]!;
      const r = await wrk(dir, t, durationS);
      out[t.name]!.push(r);
      log(
        `  wrk c1 round ${round + 1} ${t.name}: ${Math.round(r.rps)} req/s, p50 ${r.p50Ms.toFixed(3)} p99 ${r.p99Ms.toFixed(3)} p99.9 ${r.p999Ms.toFixed(3)} max ${r.maxMs.toFixed(2)} ms, failures ${r.failures}`,
      );
    }
  }
  return out;
}

/** Time to first byte and whole-stream time of streamed answers at concurrency 1, ms. */
export interface StreamStats {
  n: number;
  failures: number;
  ttfbP50: number;
  ttfbP90: number;
  ttfbP99: number;
  totalP50: number;
  totalP99: number;
}

const pct = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? NaN;

async function oneStream(t: Target): Promise<{ ttfb: number; total: number; ok: boolean }> {
  const t0 = performance.now();
  const res = await fetch(t.url, { method: "POST", headers: t.headers, body: t.body });
  const reader = res.body!.getReader();
  let ttfb = NaN;
  let text = "";
  const dec = new TextDecoder();
  for (;;) {
    const r = await reader.read();
    if (Number.isNaN(ttfb)) ttfb = performance.now() - t0;
    if (r.done) break;
    text += dec.decode(r.value, { stream: true });
  }
  const total = performance.now() - t0;
  return { ttfb, total, ok: res.status === 200 && text.includes("[DONE]") && text.includes('"usage"') };
}

/** Sequential streamed requests rotating over the targets; first byte = the first body chunk read. */
export async function streamLatency(targets: Target[], warmup: number, n: number): Promise<Record<string, StreamStats>> {
  for (let i = 0; i < warmup; i++) for (const t of targets) await oneStream(t);
  const ttfb: Record<string, number[]> = {};
  const total: Record<string, number[]> = {};
  const failures: Record<string, number> = {};
  for (const t of targets) ((ttfb[t.name] = []), (total[t.name] = []), (failures[t.name] = 0));
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < targets.length; j++) {
      const t = targets[(i + j) % targets.length]!;
      const r = await oneStream(t);
      ttfb[t.name]!.push(r.ttfb);
      total[t.name]!.push(r.total);
      if (!r.ok) failures[t.name]!++;
    }
  }
  const out: Record<string, StreamStats> = {};
  for (const t of targets) {
    const a = ttfb[t.name]!.sort((x, y) => x - y);
    const b = total[t.name]!.sort((x, y) => x - y);
    out[t.name] = {
      n: a.length,
      failures: failures[t.name]!,
      ttfbP50: pct(a, 50),
      ttfbP90: pct(a, 90),
      ttfbP99: pct(a, 99),
      totalP50: pct(b, 50),
      totalP99: pct(b, 99),
    };
  }
  return out;
}
