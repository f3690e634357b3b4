/**
 * The gateway's memory as an operator starts it (issue 23): `bun src/main.ts serve` and the compiled binary
 * (`dist/gateway serve`, built first with `bun run build`), each with nothing of the bench's added (no preload, no
 * variable). Same set-up as run.ts (stand-ins, a private Redis, a fresh database, the bench's catalog, a key made by
 * SIWE sign-in); per launch the bench's JSON and streamed load at concurrency 32 against the 0 ms stand-in, with
 * the gateway's resident memory sampled every 100 ms, then read after the load and 5 s later.
 *
 *   bun bench/memory.ts                                  # source, then binary
 *   BENCH_MEMORY_LAUNCH=source bun bench/memory.ts
 *   BUN_JSC_forceRAMSize=1073741824 bun bench/memory.ts  # an operator's heap hint instead of the gateway's own
 *   BENCH_MEMORY_LAUNCH=stats bun bench/memory.ts        # source with bench/heapStats.preload.ts: JSC's heap,
 *                                                        # the mappings, before and after a full collection
 *   (with stats: BENCH_MEMORY_MODULES=1 lists the modules loaded, BENCH_MEMORY_MAPS=1 the largest mappings,
 *    BENCH_GATEWAY_ENV=BENCH_MIMALLOC_DUMP=1 has the gateway print mimalloc's statistics to its log)
 *
 * BENCH_MEMORY_STACK=external,embedded (the default, both): the gateway on the bench's Redis and Postgres
 * (REDIS_URL, DATABASE_URL), then as the single binary starts with neither, on its embedded redis-server and PGlite
 * in DATA_DIR. The serving process, its background process (flusher, sweeper, repairs, and with no URLs the
 * embedded services: a native Postgres as its child, or PGlite inside it), the embedded redis-server and the native
 * Postgres's processes are each read on their own (issue 31).
 *
 * BENCH_DURATION_S (default 10) and BENCH_ROUNDS (default 2): per round JSON, then streams, each that long.
 * Prints one line per run and a summary line per launch on stderr.
 */
import { existsSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { autocannon, descendants, type Target } from "./measure.ts";
import { setUp, targetsFor } from "./phases.ts";
import { apiKeyWithCredit, type Gateway, type Launch, openWorkDir, runThenClean, startGateway, stopChild } from "./processes.ts";
import { f0 } from "./report.ts";
import { gatewayBody, gatewayStreamBody, log, ROOT, sleep } from "./settings.ts";

const LAUNCHES = (process.env.BENCH_MEMORY_LAUNCH || "source,binary").split(",").map((x) => x.trim()) as Launch[];
const DURATION_S = Number(process.env.BENCH_DURATION_S || 10);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 2);
const STACKS = (process.env.BENCH_MEMORY_STACK || "external,embedded").split(",").map((x) => x.trim()) as ("external" | "embedded")[];

/** VmRSS, its anonymous and file-backed parts, and VmHWM of a process, MiB. */
function memory(pid: number): { rss: number; anon: number; file: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const mib = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN) / 1024;
  return { rss: mib("VmRSS"), anon: mib("RssAnon"), file: mib("RssFile") + mib("RssShmem"), peak: mib("VmHWM") };
}

/** Resident MiB by mapping (anonymous ones by size class), largest first: what kind of memory the RSS is. */
function smaps(pid: number): string {
  const rss = new Map<string, number>();
  let name = "";
  for (const line of readFileSync(`/proc/${pid}/smaps`, "utf8").split("\n")) {
    const m = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (m) {
      const kb = (parseInt(m[2]!, 16) - parseInt(m[1]!, 16)) / 1024;
      name = m[3] || `[anon ${kb >= 65536 ? "≥64M" : kb >= 4096 ? "≥4M" : kb >= 1024 ? "≥1M" : "<1M"}]`;
    } else if (line.startsWith("Rss:")) rss.set(name, (rss.get(name) ?? 0) + Number(line.split(/\s+/)[1]) / 1024);
  }
  return [...rss]
    .filter(([, mib]) => mib >= 1)
    .sort((a, b) => b[1] - a[1])
    .map(([n, mib]) => `${f0(mib)} ${n.replace(/.*\//, "")}`)
    .join(" · ");
}

/** The ten largest resident mappings: address range size, permissions, name, resident MiB. */
function largestMappings(pid: number): string {
  const out: { head: string; rss: number }[] = [];
  let head = "";
  for (const line of readFileSync(`/proc/${pid}/smaps`, "utf8").split("\n")) {
    const m = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (m) head = `${f0((parseInt(m[2]!, 16) - parseInt(m[1]!, 16)) / 2 ** 20)} MiB ${m[3]} ${m[4] || "[anon]"}`;
    else if (line.startsWith("Rss:")) out.push({ head, rss: Number(line.split(/\s+/)[1]) / 1024 });
  }
  return out
    .sort((a, b) => b.rss - a.rss)
    .slice(0, 10)
    .map((x) => `  ${x.rss.toFixed(1)} resident of ${x.head}`)
    .join("\n");
}

/** Under the `stats` launch: the heap figures bench/heapStats.preload.ts writes on SIGUSR2, as one line. */
async function heap(gw: Gateway, when: string): Promise<void> {
  rmSync(gw.heapFile, { force: true });
  gw.child.proc.kill("SIGUSR2");
  for (let i = 0; i < 100 && !existsSync(gw.heapFile); i++) await sleep(50);
  if (!existsSync(gw.heapFile)) {
    log(`${when}: no heap figures`);
    return;
  }
  const h = JSON.parse(readFileSync(gw.heapFile, "utf8"));
  log(`${when}: mappings (MiB) ${smaps(gw.child.proc.pid!)}`);
  if (process.env.BENCH_MEMORY_MAPS) log(`${when}: largest mappings\n${largestMappings(gw.child.proc.pid!)}`);
  const m = (b: number) => f0(b / 2 ** 20);
  log(
    `${when}: heap ${m(h.heapSize)} MiB of ${m(h.heapCapacity)} capacity, extra ${m(h.extraMemorySize)} MiB, ${h.objectCount} objects, ` +
      `${h.modules} modules · jsc ${JSON.stringify(h.jsc)} · process ${JSON.stringify(h.process)}\n  top: ${JSON.stringify(h.top)}\n  after Bun.gc(true) (${f0(h.gcMs)} ms): RSS ${m(h.rssBefore)} → ${m(h.rssAfterGc)} MiB, heap ${m(h.heapAfterGc)} of ${m(h.capacityAfterGc)}, extra ${m(h.extraAfterGc)} MiB\n  top after: ${JSON.stringify(h.topAfterGc)}`,
  );
  if (process.env.BENCH_MEMORY_MODULES) log(`modules: ${h.moduleList.join("\n")}`);
}

const show = (m: ReturnType<typeof memory>) => `${f0(m.rss)} MiB (anon ${f0(m.anon)}, file ${f0(m.file)}), peak ${f0(m.peak)} MiB`;

/** The gateway's other processes by what they are: its background process (bun), the embedded redis-server and Postgres. */
function others(pid: number): { background?: number; redis?: number; postgres: number[] } {
  const out: { background?: number; redis?: number; postgres: number[] } = { postgres: [] };
  for (const child of descendants(pid)) {
    let cmd = "";
    try {
      cmd = readFileSync(`/proc/${child}/cmdline`, "utf8");
    } catch {
      continue; // gone meanwhile
    }
    if (cmd.includes("redis-server")) out.redis = child;
    else if (cmd.startsWith("postgres") || cmd.includes("/native/bin/postgres")) out.postgres.push(child);
    else if (readFileSync(`/proc/${child}/environ`, "utf8").includes("GATEWAY_BACKGROUND=1")) out.background = child;
  }
  return out;
}

/** CPU seconds a process has used so far (all its threads). */
function cpuOf(pid: number | undefined): number {
  if (!pid) return NaN;
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return NaN;
  }
}

/** Proportional set size, MiB: a process's share of the pages it maps, shared memory split among its users. */
function pss(pid: number): number {
  try {
    return Number(/^Pss:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, "utf8"))?.[1] ?? 0) / 1024;
  } catch {
    return 0;
  }
}

/** The native embedded Postgres's processes: how many, the largest RSS, and their PSS added up (their shared memory once). */
function showPostgres(pids: number[]): string {
  if (!pids.length) return "";
  const rss = pids.map((p) => memory(p).rss);
  return ` · postgres ${pids.length} processes: largest ${f0(Math.max(...rss))} MiB RSS, PSS together ${f0(pids.reduce((a, p) => a + pss(p), 0))} MiB`;
}

/** Each of the gateway's processes, one phrase each. */
function showAll(pid: number): string {
  const o = others(pid);
  return (
    `serving ${show(memory(pid))}` +
    (o.background ? ` · background ${show(memory(o.background))}` : "") +
    (o.redis ? ` · redis-server ${show(memory(o.redis))}` : "") +
    showPostgres(o.postgres)
  );
}

async function main(): Promise<void> {
  openWorkDir();
  if (LAUNCHES.includes("binary")) {
    const build = Bun.spawnSync(["bun", "run", "build"], { cwd: ROOT, stdout: "ignore", stderr: "pipe" });
    if (build.exitCode !== 0) throw new Error(`bun run build failed: ${build.stderr.toString()}`);
    log(`built ${join(ROOT, "dist", "gateway")}`);
  }
  const s = await setUp(); // the bench's own gateway is stopped at once: only its stand-ins, Redis and database are used
  await stopChild(s.gw.child);
  const node = Bun.which("node");
  const loadgen = node ? [node] : [process.execPath];
  const summary: string[] = [];
  for (const [stack, launch] of STACKS.flatMap((st) => LAUNCHES.map((l) => [st, l] as const))) {
    const name = stack === "embedded" ? `${launch}+embedded` : launch;
    const gw =
      stack === "embedded"
        ? await startGateway(s.upstreams, undefined, undefined, `gateway-${launch}-embedded`, {}, s.anthropic.port, launch)
        : await startGateway(s.upstreams, s.redis.url, s.db, `gateway-${launch}`, {}, s.anthropic.port, launch);
    const pid = gw.child.proc.pid;
    await sleep(1_000); // past start-up's own garbage
    const started = memory(pid);
    const { key } = await apiKeyWithCredit(gw);
    const headers = { "content-type": "application/json", authorization: `Bearer ${key}` };
    const url = `${gw.base}/v1/chat/completions`;
    const json: Target = { name: "gateway", url, headers, body: gatewayBody(0) };
    const stream: Target = { name: "gateway", url, headers, body: gatewayStreamBody(0) };
    const watch = { target: pid, standin: s.upstreams[0]!.standin.proc.pid, redis: s.redis.pid };
    const idle = memory(pid);
    log(`${name}: pid ${pid}, idle after start ${show(started)}, after a sign-in ${showAll(pid)}`);
    if (launch === "stats") await heap(gw, "idle");
    // RSS sampled every 100 ms under load: its mean says more than one reading of a sawtooth.
    const samples: number[] = [];
    const sampler = setInterval(() => samples.push(memory(pid).rss), 100);
    const rps = { json: 0, stream: 0 };
    const cpu = { json: 0, stream: 0 };
    for (let round = 0; round < ROUNDS; round++) {
      for (const [kind, t] of [
        ["json", json],
        ["stream", stream],
      ] as const) {
        const { background: bg, postgres: pgs } = others(pid!);
        const pgCpuOf = () => pgs.reduce((a, p) => a + (cpuOf(p) || 0), 0);
        const [bgCpu, pgCpu] = [cpuOf(bg), pgCpuOf()];
        const r = await autocannon(loadgen, t, 32, DURATION_S, watch);
        const bgUs = ((cpuOf(bg) - bgCpu) * 1e6) / Math.max(1, r.total);
        const pgUs = ((pgCpuOf() - pgCpu) * 1e6) / Math.max(1, r.total);
        rps[kind] += r.rps / ROUNDS;
        cpu[kind] += r.cpuUsPerRequest / ROUNDS;
        log(
          `${name} ${kind} c32 round ${round + 1}: ${f0(r.rps)} req/s · ${f0(r.cpuUsPerRequest)} µs CPU/request · ` +
            `background ${f0(bgUs)} µs CPU/request${pgs.length ? ` (postgres ${f0(pgUs)})` : ""} · non-2xx ${r.non2xx + r.errors} · RSS ${showAll(pid)}`,
        );
      }
    }
    clearInterval(sampler);
    const after = memory(pid);
    const afterAll = showAll(pid);
    const underLoad = samples.reduce((a, b) => a + b, 0) / samples.length;
    await sleep(5_000);
    const later = memory(pid);
    const laterAll = showAll(pid);
    if (launch === "stats") await heap(gw, "after the load");
    const line =
      `${name}: RSS at start ${f0(started.rss)} MiB, after a sign-in ${f0(idle.rss)} MiB · under load mean ${f0(underLoad)} MiB · after the load ${show(after)} · 5 s later ${f0(later.rss)} MiB · ` +
      `json ${f0(rps.json)} req/s ${f0(cpu.json)} µs · stream ${f0(rps.stream)} req/s ${f0(cpu.stream)} µs\n  after the load: ${afterAll}\n  5 s later: ${laterAll}`;
    summary.push(line);
    await stopChild(gw.child);
  }
  for (const line of summary) log(line);
}

await runThenClean(main);
