/**
 * Checkouts side by side: each tree's gateway (`bun src/main.ts serve` in that tree, its own Redis and database)
 * beside the plain proxy, all on one stand-in, c32, the targets' runs alternating round by round (order reversed
 * every other round). A before/after comparison made in the same minutes: on a shared machine only that compares.
 *
 *   BENCH_AB_TREES=/work/before,/work/after bun bench/ab.ts
 *   BENCH_AB_TREES=/work/x,/work/x BENCH_AB_ENVS='|SOME_SETTING=1' bun bench/ab.ts    # one tree, two settings
 *
 * BENCH_AB_KINDS (json,stream; default stream), BENCH_AB_DELAY (the stand-in's delay, ms; default 0),
 * BENCH_ROUNDS (default 4), BENCH_DURATION_S (default 5). Prints each run, then per target the median CPU µs per
 * request (the process tree; the serving process alone in brackets) and the medians of the per-round ratios to the
 * proxy's CPU and req/s. The load generator and the admin command run from this checkout.
 */
import { closeSync, openSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { catalogModel, STANDIN_KEY, standinProvider } from "../test/helpers/catalog.ts";
import { freePort } from "../test/helpers/child.ts";
import { autocannon, type Target } from "./measure.ts";
import {
  apiKeyWithCredit,
  type Child,
  freshDatabase,
  type Gateway,
  onCleanup,
  openWorkDir,
  runThenClean,
  startRedis,
  startUpstreams,
  stopChild,
} from "./processes.ts";
import { directBody, directStreamBody, gatewayBody, gatewayStreamBody, log } from "./settings.ts";

const TREES = (process.env.BENCH_AB_TREES ?? "").split(",").filter(Boolean);
const ENVS = (process.env.BENCH_AB_ENVS ?? "").split("|");
const KINDS = (process.env.BENCH_AB_KINDS || "stream").split(",");
const DELAY = Number(process.env.BENCH_AB_DELAY || 0);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 4);
const DURATION_S = Number(process.env.BENCH_DURATION_S || 5);

const settings = (s: string | undefined) =>
  Object.fromEntries(
    (s ?? "")
      .split(",")
      .filter((kv) => kv.includes("="))
      .map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
  );

async function main(): Promise<void> {
  if (TREES.length === 0) throw new Error("BENCH_AB_TREES: the checkouts to compare, comma-separated");
  const dir = openWorkDir();
  const u = (await startUpstreams([DELAY]))[DELAY]!;
  const modelsFile = join(dir, "models.json");
  const provider = `standin${DELAY}`;
  writeFileSync(
    modelsFile,
    JSON.stringify({
      providers: { [provider]: standinProvider(`http://127.0.0.1:${u.standinPort}/v1`) },
      models: [catalogModel(provider, "echo", { name: "echo" })],
    }),
  );
  const gateways: { label: string; pid: number; gw: Gateway; key: string }[] = [];
  for (const [i, tree] of TREES.entries()) {
    const redis = await startRedis();
    const db = await freshDatabase();
    const port = freePort();
    const domain = `127.0.0.1:${port}`;
    const env: Record<string, string> = {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: process.env.HOME ?? dir,
      PORT: String(port),
      HOST: "127.0.0.1",
      REDIS_URL: redis.url,
      DATA_DIR: join(dir, `data-ab-${i}`),
      MODELS_FILE: modelsFile,
      STANDIN_KEY,
      LOG_LEVEL: "info",
      RATE_LIMIT_REQUESTS: "10000000",
      CREDIT_LEASES: "on", // as bench/run.ts and focus.ts run it
      SIWE_DOMAIN: domain,
      SIWE_CHAIN_IDS: "31337",
      DEPLOYMENT: "local",
      ...(db ? { DATABASE_URL: db.url } : {}),
      ...settings(ENVS[i]),
    };
    const logFile = join(dir, `gateway-ab-${i}.log`);
    const fd = openSync(logFile, "a");
    const proc = Bun.spawn([process.execPath, "src/main.ts", "serve"], { cwd: tree, env, stdin: "ignore", stdout: fd, stderr: fd });
    closeSync(fd);
    const child: Child = { name: `gateway-ab-${i}`, proc, logFile };
    onCleanup(() => stopChild(child));
    const base = `http://${domain}`;
    for (let t = 0; ; t++) {
      if (proc.exitCode !== null) throw new Error(`the gateway of ${tree} exited (${proc.exitCode}); see ${logFile}`);
      const ok = await fetch(`${base}/health`)
        .then((r) => r.arrayBuffer().then(() => r.status === 200))
        .catch(() => false);
      if (ok) break;
      if (t > 600) throw new Error(`the gateway of ${tree} did not become healthy; see ${logFile}`);
      await Bun.sleep(100);
    }
    const gw: Gateway = { child, base, domain, env, profileDir: "", loopFile: "", heapFile: "" };
    const label = `${i}:${tree.split("/").pop()}${ENVS[i] ? `+${ENVS[i]}` : ""}`;
    gateways.push({ label, pid: proc.pid, gw, key: (await apiKeyWithCredit(gw)).key });
    log(`gateway ${label}: pid ${proc.pid} on ${base}`);
  }
  const targets: { label: string; kind: string; pid: number; t: Target }[] = [];
  for (const kind of KINDS) {
    const stream = kind === "stream";
    const proxy = `http://127.0.0.1:${u.baselinePort}/v1/chat/completions`;
    const headers = { "content-type": "application/json" };
    targets.push({
      label: `proxy ${kind}`,
      kind,
      pid: u.baseline.proc.pid!,
      t: {
        name: "baseline",
        url: proxy,
        headers: { ...headers, authorization: `Bearer ${STANDIN_KEY}` },
        body: stream ? directStreamBody : directBody,
      },
    });
    for (const g of gateways) {
      const body = stream ? gatewayStreamBody(DELAY) : gatewayBody(DELAY);
      const url = `${g.gw.base}/v1/chat/completions`;
      targets.push({
        label: `${g.label} ${kind}`,
        kind,
        pid: g.pid,
        t: { name: "gateway", url, headers: { ...headers, authorization: `Bearer ${g.key}` }, body },
      });
    }
  }
  const node = Bun.which("node");
  const loadgen = node ? [node] : [process.execPath];
  const watch = (pid: number) => ({ target: pid, standin: u.standin.proc.pid, redis: 0 });
  for (const x of targets) await autocannon(loadgen, x.t, 32, 2, watch(x.pid)); // warm-up
  const cpu: Record<string, number[]> = {};
  const serving: Record<string, number[]> = {};
  const rps: Record<string, number[]> = {};
  for (let round = 0; round < ROUNDS; round++) {
    for (const x of round % 2 ? [...targets].reverse() : targets) {
      const r = await autocannon(loadgen, x.t, 32, DURATION_S, watch(x.pid));
      (cpu[x.label] ??= []).push(r.cpuUsPerRequest);
      (serving[x.label] ??= []).push(r.servingUsPerRequest);
      (rps[x.label] ??= []).push(r.rps);
      log(
        `ab ${DELAY} ms round ${round + 1} ${x.label}: ${r.rps.toFixed(0)} req/s · ${r.cpuUsPerRequest.toFixed(0)} µs CPU/request ` +
          `(serving ${r.servingUsPerRequest.toFixed(0)}) · non-2xx ${r.non2xx + r.errors}`,
      );
    }
  }
  for (const x of targets) {
    const proxy = `proxy ${x.kind}`;
    const ratios = cpu[x.label]!.map((c, i) => c / cpu[proxy]![i]!);
    const rates = rps[x.label]!.map((c, i) => c / rps[proxy]![i]!);
    log(
      `ab ${DELAY} ms ${x.label}: ${median(cpu[x.label]!).toFixed(0)} µs CPU/request (serving ${median(serving[x.label]!).toFixed(0)}), ` +
        `×proxy ${median(ratios).toFixed(2)} [${ratios.map((v) => v.toFixed(2)).join(" ")}]; ` +
        `req/s ratio ${median(rates).toFixed(2)} [${rates.map((v) => v.toFixed(2)).join(" ")}]`,
    );
  }
}

/** The middle value (the mean of the two middle ones for an even count). */
function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

await runThenClean(main);
