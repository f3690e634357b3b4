import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import type { Config } from "./config.ts";
import { log } from "./log.ts";

// Set by the primary on the processes it starts; never by an operator.
const WORKER_ENV = "GATEWAY_WORKER";
const BACKGROUND_ENV = "GATEWAY_BACKGROUND";
const DIR_ENV = "GATEWAY_WORKERS_DIR";
// A worker that keeps dying is restarted at most this often, so a broken one cannot spin a core.
const RESTART_DELAY_MS = 1_000;
// A worker that has not listened by then is taken as failed (it checks Redis and Postgres first, 5 s each at most).
const START_DEADLINE_MS = 30_000;
// The background process opens PGlite (seconds on a busy machine), migrates and checks the ledger first.
const BACKGROUND_START_DEADLINE_MS = 60_000;
const PARENT_ENV = "GATEWAY_PARENT";

/**
 * What this process is in the gateway: the first serving process, alone (WORKERS=1) or the primary (it starts the
 * workers and the background process); one of the workers it started; or the background process, which serves no
 * request: it owns the embedded Redis and Postgres (PGlite) and runs the flusher, the sweeper, the rebuild and the
 * repair jobs, so that no request waits behind them on a serving thread (design.md §10). `dir` holds the processes'
 * metrics sockets (observe/peers.ts).
 */
export type WorkerRole =
  | { kind: "single"; dir: string }
  | { kind: "primary"; count: number; dir: string }
  | { kind: "worker"; index: number; dir: string }
  | { kind: "background"; dir: string };

/** Reads the role from the configuration and the variables the primary sets on the processes it starts. */
export function workerRole(config: Config): WorkerRole {
  const index = process.env[WORKER_ENV];
  const dir = process.env[DIR_ENV];
  if (process.env[BACKGROUND_ENV] && dir) return { kind: "background", dir };
  if (index && dir) return { kind: "worker", index: Number(index), dir };
  const own = mkdtempSync(join(tmpdir(), "gateway-workers-"));
  if (config.workers <= 1) return { kind: "single", dir: own };
  return { kind: "primary", count: config.workers, dir: own };
}

/** The command that started this process, for its workers: the compiled binary, or bun with the entry file. */
function selfCommand(): string[] {
  return Bun.main.startsWith("/$bunfs/") ? [process.execPath, "serve"] : [process.execPath, Bun.main, "serve"];
}

/** A worker tells the primary it is listening (the primary announces the gateway only once all are). */
export function announceListening(): void {
  process.send?.({ listening: true });
}

/** The background process tells the primary its services are up (the embedded ones serve), or why they are not. */
export function announceBackground(message: { ready: true } | { failed: string }): void {
  process.send?.(message);
}

/** A worker (or the background process) stops when its primary is gone (even killed with -9): the IPC channel closes with it. */
export function onPrimaryGone(stop: () => void): void {
  process.on("disconnect", stop);
}

/**
 * The primary's workers: started with the primary's own command and environment plus the port it bound (so PORT=0
 * works), restarted if one dies, stopped with SIGTERM (each settles its in-flight requests) before the primary
 * drains the outbox and stops the embedded services.
 */
export class WorkerPool {
  private readonly children = new Map<number, Subprocess>();
  private stopping = false;

  constructor(
    private readonly role: Extract<WorkerRole, { kind: "primary" }>,
    private readonly port: number,
  ) {}

  /** Starts workers 1..count-1 (the primary is worker 0) and resolves once every one listens. */
  async start(): Promise<void> {
    const started: Promise<void>[] = [];
    for (let i = 1; i < this.role.count; i++) started.push(this.spawn(i));
    await Promise.all(started);
  }

  private spawn(index: number): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`worker ${index} did not listen within ${START_DEADLINE_MS / 1000} s`)),
        START_DEADLINE_MS,
      );
      const child = Bun.spawn(selfCommand(), {
        env: { ...process.env, PORT: String(this.port), [WORKER_ENV]: String(index), [DIR_ENV]: this.role.dir },
        stdio: ["ignore", "inherit", "inherit"],
        serialization: "json",
        ipc: (message: { listening?: boolean }) => {
          if (message?.listening) (clearTimeout(timer), resolve());
        },
        onExit: (_proc, code, signal) => {
          clearTimeout(timer);
          this.children.delete(index);
          if (this.stopping) return;
          reject(new Error(`worker ${index} exited (${signal ?? code}) before it listened`));
          log.error("a worker exited; starting another", { worker: index, code, signal });
          setTimeout(() => {
            if (!this.stopping) this.spawn(index).catch((e) => log.error("a worker did not start", { worker: index, error: e }));
          }, RESTART_DELAY_MS).unref();
        },
      });
      this.children.set(index, child);
    });
  }

  /** SIGTERM to every worker, then waits until each has finished its requests and exited. */
  async stop(): Promise<void> {
    this.stopping = true;
    const exits = [...this.children.values()].map((c) => (c.kill("SIGTERM"), c.exited));
    await Promise.all(exits);
  }

  /** The workers' process ids (tests and the benchmark look at them). */
  pids(): number[] {
    return [...this.children.values()].map((c) => c.pid);
  }
}

/** The background process did not start: its one line (a dependency down, a refused Redis), printed by the primary. */
export class BackgroundFailed extends Error {}

/**
 * The one background process of a gateway, started by its first serving process before that one connects: it opens
 * the embedded Redis and Postgres (or checks the external ones), migrates, makes sure Redis holds the ledger, and
 * runs the flusher, the sweeper and the repair jobs. Killed (even with -9), it is started again; serving goes on
 * meanwhile (the ledger is in Redis; charges wait in the outbox; the restarted one adopts the redis-server and
 * opens PGlite again on the same DATA_DIR). Its flusher keeps one consumer name across restarts, so the new one
 * reads what the dead one had read but not written first. Stopped with SIGTERM after every serving process: it
 * drains the outbox into Postgres, then stops the embedded services.
 */
export class BackgroundProcess {
  private child?: Subprocess;
  private stopping = false;

  constructor(private readonly dir: string) {}

  /** Starts it and resolves once its services are up; rejects with its one-line reason if it cannot start. */
  start(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      let settled = false;
      const timer = setTimeout(() => {
        settled = true;
        child.kill("SIGKILL");
        reject(new BackgroundFailed(`the background process did not start within ${BACKGROUND_START_DEADLINE_MS / 1000} s`));
      }, BACKGROUND_START_DEADLINE_MS);
      const child = Bun.spawn(selfCommand(), {
        env: { ...process.env, [BACKGROUND_ENV]: "1", [DIR_ENV]: this.dir, [PARENT_ENV]: String(process.pid) },
        stdio: ["ignore", "inherit", "inherit"],
        serialization: "json",
        ipc: (message: { ready?: boolean; failed?: string }) => {
          if (settled) return;
          if (message?.ready) ((settled = true), clearTimeout(timer), resolve());
          else if (message?.failed) ((settled = true), clearTimeout(timer), reject(new BackgroundFailed(message.failed)));
        },
        onExit: (_proc, code, signal) => {
          clearTimeout(timer);
          if (this.child === child) this.child = undefined;
          if (!settled) {
            settled = true;
            reject(new BackgroundFailed(`the background process exited (${signal ?? code}) before it was ready`));
            return;
          }
          if (this.stopping) return;
          log.error("the background process exited; starting another", { code, signal });
          setTimeout(() => {
            if (!this.stopping) this.start().catch((e) => log.error("the background process did not start; retrying", { error: e }));
          }, RESTART_DELAY_MS).unref();
        },
      });
      this.child = child;
    });
  }

  /** Asks it to stop (IPC: it ignores signals), then waits until it drained the outbox and stopped the embedded services. */
  async stop(): Promise<void> {
    this.stopping = true;
    const child = this.child;
    if (!child) return;
    try {
      child.send({ stop: true });
    } catch {
      child.kill("SIGKILL"); // its channel is gone: it is stopping on its own, or stuck
    }
    await child.exited;
  }

  /** Its process id (tests and the benchmark look at it). */
  pid(): number | undefined {
    return this.child?.pid;
  }
}

/** The serving process that started this background process: its flusher's consumer name stays across restarts. */
export function backgroundParent(): string {
  return process.env[PARENT_ENV] ?? String(process.ppid);
}

/** Removes the metrics sockets' folder once every process of the gateway has stopped. */
export function removeRoleDir(role: WorkerRole): void {
  if (role.kind === "single" || role.kind === "primary") rmSync(role.dir, { recursive: true, force: true });
}
