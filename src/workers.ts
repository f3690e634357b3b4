import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import type { Config } from "./config.ts";
import { log } from "./log.ts";

// Set by the primary on the processes it starts; never by an operator.
const WORKER_ENV = "GATEWAY_WORKER";
const DIR_ENV = "GATEWAY_WORKERS_DIR";
// A worker that keeps dying is restarted at most this often, so a broken one cannot spin a core.
const RESTART_DELAY_MS = 1_000;
// A worker that has not listened by then is taken as failed (it checks Redis and Postgres first, 5 s each at most).
const START_DEADLINE_MS = 30_000;

/**
 * What this process is among those serving the port: alone (WORKERS=1), the primary (it owns the embedded Redis
 * and Postgres, the background jobs and the workers), or one of the workers it started (they serve requests only).
 */
export type WorkerRole =
  { kind: "single" } | { kind: "primary"; count: number; dir: string } | { kind: "worker"; index: number; dir: string };

/** Reads the role from the configuration and the variables the primary sets on its workers. */
export function workerRole(config: Config): WorkerRole {
  const index = process.env[WORKER_ENV];
  const dir = process.env[DIR_ENV];
  if (index && dir) return { kind: "worker", index: Number(index), dir };
  if (config.workers <= 1) return { kind: "single" };
  return { kind: "primary", count: config.workers, dir: mkdtempSync(join(tmpdir(), "gateway-workers-")) };
}

/** The command that started this process, for its workers: the compiled binary, or bun with the entry file. */
function selfCommand(): string[] {
  return Bun.main.startsWith("/$bunfs/") ? [process.execPath, "serve"] : [process.execPath, Bun.main, "serve"];
}

/** A worker tells the primary it is listening (the primary announces the gateway only once all are). */
export function announceListening(): void {
  process.send?.({ listening: true });
}

/** A worker stops when its primary is gone (even killed with -9): the IPC channel closes with it. */
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
    rmSync(this.role.dir, { recursive: true, force: true });
  }

  /** The workers' process ids (tests and the benchmark look at them). */
  pids(): number[] {
    return [...this.children.values()].map((c) => c.pid);
  }
}
