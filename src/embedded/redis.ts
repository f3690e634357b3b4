import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { Redis } from "ioredis";

/** A redis-server this process started (or found already running in the same data dir). */
export interface EmbeddedRedis {
  /** Unix socket path, usable as ioredis' first argument. */
  socket: string;
  /** False when another process's redis-server already served this data dir and we joined it. */
  started: boolean;
  /** True when the redis-server found was left by a process that is gone (a gateway killed with kill -9): ours now. */
  adopted?: boolean;
  /** The child's process id when this process started it (the benchmark samples its CPU time). */
  pid?: number;
  /** Stops the child if this process started or adopted it; a shared one is left running for its owner. */
  stop(): Promise<void>;
}

async function ping(socket: string): Promise<boolean> {
  if (!existsSync(socket)) return false;
  const r = new Redis(socket, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  r.on("error", () => {}); // a socket not yet listening is an expected "no" here, not a stack trace on stderr
  try {
    await r.connect();
    return (await r.ping()) === "PONG";
  } catch {
    return false;
  } finally {
    r.disconnect();
  }
}

/**
 * Starts a private redis-server on a unix socket in `dir` (no TCP port to collide with), or joins the one
 * already serving that dir (the admin command beside a running gateway). AOF keeps the ledger across crashes.
 * `port` also listens on 127.0.0.1 (tests sharing it with a gateway child process).
 */
export async function startEmbeddedRedis(dir: string, opts: { persist?: boolean; port?: number } = {}): Promise<EmbeddedRedis> {
  mkdirSync(dir, { recursive: true });
  const socket = join(dir, "redis.sock");
  const ownerFile = join(dir, "redis.owner");
  if (await ping(socket)) {
    if (alive(readOwner(ownerFile))) return { socket, started: false, stop: async () => {} };
    return adopt(socket, ownerFile);
  }
  rmSync(socket, { force: true });

  const persist = opts.persist ?? true;
  // noeviction: a full Redis refuses writes (the request fails) instead of silently dropping a balance or a hold.
  const args = [
    "--port",
    String(opts.port ?? 0),
    "--bind",
    "127.0.0.1",
    "--maxmemory-policy",
    "noeviction",
    "--unixsocket",
    socket,
    "--unixsocketperm",
    "700",
    "--dir",
    dir,
    "--save",
    "",
    "--appendonly",
    persist ? "yes" : "no",
    "--appendfsync",
    "everysec",
    "--daemonize",
    "no",
    "--loglevel",
    "warning",
    "--logfile",
    join(dir, "redis.log"),
  ];
  let child: Subprocess;
  try {
    child = Bun.spawn(["redis-server", ...args], { stdout: "ignore", stderr: "inherit" });
  } catch {
    throw new Error("redis-server is not installed: install it (apt-get install redis-server) or set REDIS_URL");
  }
  for (let i = 0; i < 200; i++) {
    if (child.exitCode !== null) throw new Error(`redis-server exited with ${child.exitCode}; see ${join(dir, "redis.log")}`);
    if (await ping(socket)) {
      writeFileSync(ownerFile, String(process.pid));
      return {
        socket,
        started: true,
        pid: child.pid,
        stop: async () => {
          if (child.exitCode !== null) return;
          child.kill("SIGTERM"); // redis-server flushes the AOF on SIGTERM
          await child.exited;
        },
      };
    }
    await Bun.sleep(25);
  }
  child.kill("SIGKILL");
  throw new Error("redis-server did not start within 5 s");
}

/** The process id in the owner file (the process that started or adopted the redis-server), if any. */
export function readOwner(file: string): number | undefined {
  try {
    const pid = Number(readFileSync(file, "utf8").trim());
    return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** Whether `pid` is a running process (not a zombie waiting for its parent to read its exit). */
export function alive(pid: number | undefined): boolean {
  if (pid === undefined) return false;
  try {
    process.kill(pid, 0);
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return true; // no /proc: kill(0) said it is there
  }
}

/**
 * A redis-server whose owner is gone (a gateway killed with kill -9 leaves it running): this process takes it
 * over, so its own stop stops it (SIGTERM: redis-server flushes the AOF) instead of leaving it for nobody.
 */
async function adopt(socket: string, ownerFile: string): Promise<EmbeddedRedis> {
  const r = new Redis(socket, { maxRetriesPerRequest: 0, retryStrategy: () => null });
  r.on("error", () => {});
  let pid: number;
  try {
    pid = Number(/process_id:(\d+)/.exec(await r.info("server"))?.[1]);
  } finally {
    r.disconnect();
  }
  if (!Number.isSafeInteger(pid) || pid <= 0) return { socket, started: false, stop: async () => {} };
  writeFileSync(ownerFile, String(process.pid));
  return {
    socket,
    started: false,
    adopted: true,
    pid,
    stop: async () => {
      try {
        process.kill(pid, "SIGTERM");
      } catch {
        return; // already gone
      }
      for (let i = 0; i < 400 && alive(pid); i++) await Bun.sleep(25);
    },
  };
}
