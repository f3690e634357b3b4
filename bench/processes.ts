/**
 * Everything the benchmark starts, and how it stops: the provider stand-ins and baseline proxies (a process
 * each), a private redis-server and a fresh database (the test helpers'), and the gateway with a catalog of one
 * model per stand-in. Each start registers its stop, so `cleanup` leaves nothing running, also on error, Ctrl-C
 * or the watchdog.
 */
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import postgres from "postgres";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { createSiweMessage, generateSiweNonce } from "viem/siwe";
import { catalogModel, STANDIN_KEY, standinProvider } from "../test/helpers/catalog.ts";
import { freePort } from "../test/helpers/child.ts";
import { newDatabase, privateRedis } from "../test/helpers/services.ts";
import { log, PROFILE, ROOT, S, sleep } from "./settings.ts";

/** A process the benchmark started; its stdout (unless piped) and stderr go to `logFile`. */
export interface Child {
  name: string;
  proc: Subprocess;
  logFile: string;
}

const children: Child[] = [];
const cleanups: (() => Promise<void> | void)[] = [];
let workDir = "";

/** The temporary directory children log into and the gateway keeps its data in; removed by cleanup. */
export function openWorkDir(): string {
  workDir = mkdtempSync(join(tmpdir(), "gw-bench-"));
  return workDir;
}

function tail(file: string, lines = 20): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "";
  }
}

/** After a failure: the end of every child's log, where the reason usually is. */
export function logChildTails(): void {
  for (const c of children) {
    const t = tail(c.logFile);
    if (t) log(`--- ${c.name} log tail ---\n${t}`);
  }
}

/** Spawns a child whose stderr (and, unless `pipeStdout`, stdout) goes to a log file in the work dir. */
function spawnChild(name: string, cmd: string[], opts: { env?: Record<string, string>; pipeStdout?: boolean } = {}): Child {
  const logFile = join(workDir, `${name}.log`);
  const fd = openSync(logFile, "a");
  const proc = Bun.spawn(cmd, {
    cwd: ROOT,
    env: opts.env ?? (process.env as Record<string, string>),
    stdin: "ignore",
    stdout: opts.pipeStdout ? "pipe" : fd,
    stderr: fd,
  });
  closeSync(fd);
  const child = { name, proc, logFile };
  children.push(child);
  return child;
}

/** Waits for the "READY <port>" line our bench children print. */
async function readyPort(child: Child, timeoutMs = 20_000): Promise<number> {
  const stdout = child.proc.stdout as ReadableStream<Uint8Array>;
  const reader = stdout.getReader();
  const dec = new TextDecoder();
  let buf = "";
  const deadline = Date.now() + timeoutMs;
  try {
    while (Date.now() < deadline) {
      const r = await Promise.race([reader.read(), sleep(deadline - Date.now()).then(() => null)]);
      if (r === null) break;
      if (r.done) throw new Error(`${child.name} exited before it was ready:\n${tail(child.logFile)}`);
      buf += dec.decode(r.value, { stream: true });
      const m = /READY (\d+)/.exec(buf);
      if (m) return Number(m[1]);
    }
  } finally {
    reader.releaseLock();
  }
  throw new Error(`${child.name} was not ready within ${timeoutMs} ms:\n${tail(child.logFile)}`);
}

/** SIGTERM, then SIGKILL after 15 s; the gateway drains its outbox into Postgres on SIGTERM. */
export async function stopChild(c: Child): Promise<void> {
  if (c.proc.exitCode !== null || c.proc.signalCode !== null) return;
  c.proc.kill("SIGTERM");
  const done = await Promise.race([c.proc.exited.then(() => true), sleep(15_000).then(() => false)]);
  if (!done) {
    log(`${c.name} (pid ${c.proc.pid}) ignored SIGTERM; killing it`);
    c.proc.kill("SIGKILL");
    await Promise.race([c.proc.exited, sleep(5_000)]);
  }
}

/** Something else to stop at cleanup (a Redis Cluster, say), after the children. */
export function onCleanup(stop: () => Promise<void> | void): void {
  cleanups.push(stop);
}

let cleaning: Promise<void> | undefined;
/** Stops everything started (the gateways first, then the other children, then Redis and the database); once. */
export function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    const order = [...children].sort((a, b) => Number(b.name.startsWith("gateway")) - Number(a.name.startsWith("gateway")));
    for (const c of order) await stopChild(c).catch((e) => log(`stopping ${c.name}: ${e}`));
    for (const f of cleanups.reverse()) await Promise.resolve(f()).catch((e) => log(`cleanup: ${e}`));
    if (workDir && !process.env.BENCH_KEEP_TMP) rmSync(workDir, { recursive: true, force: true });
  })();
  return cleaning;
}

/** Ctrl-C or a SIGTERM cleans up before the runner exits. */
export function cleanUpOnSignals(): void {
  for (const sig of ["SIGINT", "SIGTERM"] as const) {
    process.on(sig, () => {
      log(`${sig}: cleaning up`);
      void cleanup().finally(() => process.exit(130));
    });
  }
}

/** A short bench's whole life: `main` with everything it started stopped afterwards, also on error or Ctrl-C. */
export async function runThenClean(main: () => Promise<void>): Promise<never> {
  cleanUpOnSignals();
  try {
    await main();
  } finally {
    await cleanup();
  }
  process.exit(0);
}

/** The provider stand-in of one answer delay and the baseline proxy in front of it, each its own process. */
export interface Upstream {
  standin: Child;
  standinPort: number;
  baseline: Child;
  baselinePort: number;
  /** Where the baseline's loop monitor writes (bench/loopStall.preload.ts). */
  loopFile: string;
}

/** Stand-ins (test/helpers/openaiStandin.ts, by bench/standin.ts) first, then a baseline proxy per stand-in. */
export async function startUpstreams(delays: number[]): Promise<Record<number, Upstream>> {
  const standins: Record<number, { child: Child; port: number }> = {};
  for (const d of delays) {
    const child = spawnChild(`standin-${d}ms`, [process.execPath, "bench/standin.ts", String(d)], { pipeStdout: true });
    standins[d] = { child, port: await readyPort(child) };
  }
  const out: Record<number, Upstream> = {};
  for (const d of delays) {
    const { child: standin, port: standinPort } = standins[d]!;
    // The same loop monitor as the gateway's: the floor of loop delay any Bun server on this machine sees now.
    const loopFile = join(workDir, `loop-stall-baseline-${d}.json`);
    const env = {
      ...(process.env as Record<string, string>),
      BENCH_LOOP_FILE: loopFile,
      BENCH_LOOP_RESOLUTION_MS: String(S.loopResolutionMs),
    };
    const cmd = [
      process.execPath,
      "--preload",
      "./bench/loopStall.preload.ts",
      "bench/baseline-proxy.ts",
      `http://127.0.0.1:${standinPort}/v1`,
    ];
    const baseline = spawnChild(`baseline-${d}ms`, cmd, { pipeStdout: true, env });
    out[d] = { standin, standinPort, baseline, baselinePort: await readyPort(baseline), loopFile };
  }
  const ports = (pick: (u: Upstream) => number) => JSON.stringify(Object.fromEntries(delays.map((d) => [d, pick(out[d]!)])));
  log(`stand-ins on ${ports((u) => u.standinPort)}, baseline proxies on ${ports((u) => u.baselinePort)}`);
  return out;
}

/** The Anthropic-format stand-in (test/helpers/anthropicStandin.ts), its own process: the front doors' native path. */
export async function startAnthropicUpstream(): Promise<{ child: Child; port: number }> {
  const child = spawnChild("standin-anthropic", [process.execPath, "bench/standin.ts", "anthropic"], { pipeStdout: true });
  const port = await readyPort(child);
  log(`Anthropic-format stand-in on ${port}`);
  return { child, port };
}

/** `count` baseline proxies in front of one stand-in, sharing one port (reusePort): the baseline of WORKERS=count. */
export async function startBaselineGroup(standinPort: number, count: number): Promise<{ port: number; children: Child[] }> {
  const port = freePort();
  const children: Child[] = [];
  for (let i = 0; i < count; i++) {
    const cmd = [process.execPath, "bench/baseline-proxy.ts", `http://127.0.0.1:${standinPort}/v1`, String(port)];
    const child = spawnChild(`baseline-x${count}-${i}`, cmd, { pipeStdout: true });
    await readyPort(child);
    children.push(child);
  }
  return { port, children };
}

/** The test helpers' private redis-server (no persistence), served on a free TCP port for the gateway. */
export async function startRedis(): Promise<{ url: string; pid: number }> {
  const port = freePort();
  const redis = await privateRedis({ port });
  cleanups.push(() => redis.stop());
  return { url: `redis://127.0.0.1:${port}/0`, pid: redis.pid ?? 0 };
}

/** A fresh database on the machine's Postgres, or undefined when it does not answer (→ the gateway's PGlite). */
export async function freshDatabase(): Promise<{ url: string; name: string } | undefined> {
  const probe = postgres(S.pgAdminUrl, { max: 1, connect_timeout: 3, onnotice: () => {} });
  try {
    await probe`SELECT 1`;
  } catch (e) {
    log(`Postgres at ${S.pgAdminUrl} not reachable (${(e as Error).message}); the gateway uses its embedded Postgres`);
    return undefined;
  } finally {
    await probe.end({ timeout: 1 }).catch(() => {});
  }
  const db = await newDatabase(S.pgAdminUrl, "gw_bench");
  cleanups.push(async () => {
    await db.stop();
    log(`dropped database ${db.name}`);
  });
  return db;
}

/** The Anthropic-type catalog model (`claude0/claude-sonnet-4-5`), when the Anthropic stand-in runs. */
export const CLAUDE_MODEL = "claude0/claude-sonnet-4-5";

/**
 * One model per stand-in (`standin<delay>/echo`) at the tests' round prices, and CLAUDE_MODEL on the Anthropic
 * stand-in when its port is given.
 */
function catalog(upstreams: Record<number, Upstream>, anthropicPort?: number) {
  const entries = Object.entries(upstreams);
  const providers: Record<string, unknown> = Object.fromEntries(
    entries.map(([d, u]) => [`standin${d}`, standinProvider(`http://127.0.0.1:${u.standinPort}/v1`)]),
  );
  const models = entries.map(([d]) => catalogModel(`standin${d}`, "echo", { name: `echo (stand-in, ${d} ms)` }));
  if (anthropicPort) {
    providers.claude0 = standinProvider(`http://127.0.0.1:${anthropicPort}/v1`, "anthropic");
    models.push(catalogModel("claude0", "claude-sonnet-4-5"));
  }
  return { providers, models };
}

/** The gateway under test, its address, and the environment it (and the admin command) runs with. */
export interface Gateway {
  child: Child;
  base: string;
  domain: string;
  env: Record<string, string>;
  /** Where Bun writes the CPU profile under BENCH_PROFILE. */
  profileDir: string;
  /** Where the gateway's event-loop monitor writes its histogram on SIGUSR2 (bench/loopStall.preload.ts). */
  loopFile: string;
  /** Where bench/heapStats.preload.ts writes its figures on SIGUSR2 (the `stats` launch). */
  heapFile: string;
}

/**
 * How the gateway is started: `bench` is `bun src/main.ts serve` with the loop monitor preloaded (and the CPU
 * profiler under BENCH_PROFILE); `source` is exactly `bun src/main.ts serve`, `binary` is `dist/gateway serve`
 * (`bun run build`), both with nothing added, as an operator starts them (bench/memory.ts); `stats` is `source`
 * with bench/heapStats.preload.ts, which writes heap figures to `heapFile` on SIGUSR2 (a diagnostic).
 */
export type Launch = "bench" | "source" | "binary" | "stats";

/**
 * `bun src/main.ts serve` on a free port, on the given Redis (a URL, or the environment naming a Redis Cluster)
 * and database, answering /health; with neither, on its embedded redis-server and PGlite in DATA_DIR.
 */
export async function startGateway(
  upstreams: Record<number, Upstream>,
  redis: string | { REDIS_CLUSTER_NODES: string } | undefined,
  db: { url: string } | undefined,
  name = "gateway",
  extraEnv: Record<string, string> = {},
  anthropicPort?: number,
  launch: Launch = "bench",
): Promise<Gateway> {
  const modelsFile = join(workDir, "models.json");
  writeFileSync(modelsFile, JSON.stringify(catalog(upstreams, anthropicPort), null, 2));
  const port = freePort();
  const domain = `127.0.0.1:${port}`;
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: process.env.HOME ?? workDir,
    PORT: String(port),
    HOST: "127.0.0.1",
    ...(typeof redis === "string" ? { REDIS_URL: redis } : redis),
    DATA_DIR: join(workDir, `data-${name}`),
    MODELS_FILE: modelsFile,
    STANDIN_KEY,
    LOG_LEVEL: S.gatewayLogLevel,
    RATE_LIMIT_REQUESTS: "10000000", // the configured maximum; the limiter must not reject the load
    // The high-volume configuration (docs/design.md "Credit leases"); BENCH_GATEWAY_ENV=CREDIT_LEASES=off measures the default.
    CREDIT_LEASES: "on",
    SIWE_DOMAIN: domain,
    SIWE_CHAIN_IDS: "31337",
    DEPLOYMENT: "local",
    ...(db ? { DATABASE_URL: db.url } : {}),
    // The gateway gives JavaScriptCore its heap hint itself (src/heapHint.ts); the runner's own value, when set,
    // is passed on as an operator's would be, to compare.
    ...(process.env.BUN_JSC_forceRAMSize ? { BUN_JSC_forceRAMSize: process.env.BUN_JSC_forceRAMSize } : {}),
    ...extraEnv,
    // BENCH_GATEWAY_ENV="A=1,B=2": extra gateway settings, to compare configurations with the same runner.
    ...Object.fromEntries(
      (process.env.BENCH_GATEWAY_ENV ?? "")
        .split(",")
        .filter((kv) => kv.includes("="))
        .map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
    ),
  };
  const profileDir = join(workDir, "profile");
  const profFlags = PROFILE ? ["--cpu-prof", "--cpu-prof-md", `--cpu-prof-dir=${profileDir}`] : [];
  // The loop monitor is preloaded, so the gateway's own code carries no bench hooks.
  const loopFile = join(workDir, `loop-stall-${name}.json`);
  const loopEnv = { BENCH_LOOP_FILE: loopFile, BENCH_LOOP_RESOLUTION_MS: String(S.loopResolutionMs) };
  const preload = ["--preload", "./bench/loopStall.preload.ts"];
  const heapFile = join(workDir, `heap-${name}.json`);
  const commands: Record<Launch, string[]> = {
    bench: [process.execPath, ...profFlags, ...preload, "src/main.ts", "serve"],
    source: [process.execPath, "src/main.ts", "serve"],
    binary: [join(ROOT, "dist", "gateway"), "serve"],
    stats: [process.execPath, "--preload", "./bench/heapStats.preload.ts", "src/main.ts", "serve"],
  };
  const extra: Record<string, string> = launch === "bench" ? loopEnv : launch === "stats" ? { BENCH_HEAP_FILE: heapFile } : {};
  const child = spawnChild(name, commands[launch], { env: { ...env, ...extra } });
  const base = `http://${domain}`;
  await waitHealthy(child, base);
  return { child, base, domain, env, profileDir, loopFile, heapFile };
}

async function waitHealthy(gw: Child, base: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (gw.proc.exitCode !== null) throw new Error(`gateway exited with ${gw.proc.exitCode}:\n${tail(gw.logFile)}`);
    try {
      const r = await fetch(`${base}/health`, { signal: AbortSignal.timeout(2_000) });
      await r.arrayBuffer();
      if (r.status === 200) return;
    } catch {
      // not listening yet
    }
    await sleep(100);
  }
  throw new Error(`gateway not healthy within ${timeoutMs} ms:\n${tail(gw.logFile)}`);
}

/** Signs in with a fresh wallet, creates an API key, and grants the wallet credit with the admin command. */
export async function apiKeyWithCredit(
  gw: Gateway,
  account = privateKeyToAccount(generatePrivateKey()),
): Promise<{ key: string; wallet: string }> {
  const message = createSiweMessage({
    domain: gw.domain,
    address: account.address,
    uri: `http://${gw.domain}`,
    version: "1",
    chainId: 31337,
    nonce: generateSiweNonce(),
    issuedAt: new Date(),
  });
  const signature = await account.signMessage({ message });
  const res = await fetch(`${gw.base}/v1/auth/keys`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ message, signature, label: "bench" }),
  });
  const body = (await res.json()) as { key?: string };
  if (res.status !== 201 || !body.key) throw new Error(`key creation failed: ${res.status} ${JSON.stringify(body)}`);

  const wallet = account.address.toLowerCase();
  const admin = Bun.spawn(["bun", "src/main.ts", "admin", "grant", wallet, S.grantUsd, "--reason", "bench"], {
    cwd: ROOT,
    env: gw.env,
    stdout: "pipe",
    stderr: "pipe",
  });
  const killer = setTimeout(() => admin.kill("SIGKILL"), 60_000);
  const [out, err, code] = await Promise.all([new Response(admin.stdout).text(), new Response(admin.stderr).text(), admin.exited]);
  clearTimeout(killer);
  if (code !== 0) throw new Error(`admin grant failed (${code}): ${err || out}`);
  log(out.trim());
  return { key: body.key, wallet };
}
