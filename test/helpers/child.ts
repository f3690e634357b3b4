import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";

const MAIN = join(import.meta.dir, "..", "..", "src", "main.ts");

// The kernel hands out ports of this range to outgoing connections: a port picked there and bound a moment later
// can be taken meanwhile by any connection this process (or another) opens, so ports are picked below it.
const EPHEMERAL_FROM = (() => {
  try {
    return Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]) || 32768;
  } catch {
    return 32768;
  }
})();
const PICK_FROM = 10_000;

/**
 * A TCP port nobody listens on right now, for a server started a moment later (a private redis-server a child
 * process reaches by URL, a child gateway): picked at random below the ephemeral range and checked by binding it.
 */
export function freePort(): number {
  if (EPHEMERAL_FROM - PICK_FROM < 1_000) {
    const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } }); // no room below: any port
    s.stop(true);
    return s.port;
  }
  for (;;) {
    const port = PICK_FROM + Math.floor(Math.random() * (EPHEMERAL_FROM - PICK_FROM));
    try {
      Bun.listen({ hostname: "127.0.0.1", port, socket: { data() {} } }).stop(true);
      return port;
    } catch {
      // taken: pick another
    }
  }
}

/** The environment of a child gateway: this process's PATH and the like, the variables given, nothing else of ours. */
function childEnv(env: Record<string, string>): Record<string, string> {
  const base: Record<string, string> = {};
  for (const name of ["PATH", "HOME", "TMPDIR"]) if (process.env[name]) base[name] = process.env[name]!;
  return { ...base, ...env };
}

/** Runs `bun src/main.ts <args>` to its end. */
export function runMain(args: string[], env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  return spawnMain(args, env).done;
}

/** `bun src/main.ts <args>` running: `waitFor` resolves once its output (stdout or stderr) matches a log line. */
export function spawnMain(args: string[], env: Record<string, string>) {
  const proc = Bun.spawn(["bun", MAIN, ...args], { env: childEnv(env), stdout: "pipe", stderr: "pipe" });
  const out = { stdout: "", stderr: "" };
  const watchers: { re: RegExp; resolve: () => void }[] = [];
  const read = async (name: "stdout" | "stderr") => {
    const decoder = new TextDecoder();
    const reader = proc[name].getReader();
    for (let r = await reader.read(); !r.done; r = await reader.read()) {
      out[name] += decoder.decode(r.value);
      for (const w of watchers.splice(0)) w.re.test(out.stdout + out.stderr) ? w.resolve() : watchers.push(w);
    }
  };
  const done = Promise.all([read("stdout"), read("stderr"), proc.exited]).then(([, , code]) => ({ code, ...out }));
  return {
    proc,
    done,
    /** What it printed so far, stdout then stderr. */
    printed: () => out.stdout + out.stderr,
    waitFor(re: RegExp): Promise<void> {
      if (re.test(out.stdout + out.stderr)) return Promise.resolve();
      return new Promise<void>((resolve, reject) => {
        watchers.push({ re, resolve });
        void done.then((r) => reject(new Error(`exited (${r.code}) before printing ${re}: ${r.stdout}${r.stderr}`)));
      });
    },
  };
}

/** A second gateway: `bun src/main.ts serve` as a real child process. */
export interface ChildGateway {
  url: string;
  proc: Subprocess;
  /** SIGTERM and wait: a graceful shutdown drains its outbox into Postgres. */
  stop(): Promise<number>;
  /** The last of what it logged at warn and error (its stderr), for a failing test to show. */
  problems(): string;
}

// What a child's stderr keeps: a failing test shows its recent warnings, not a whole run's.
const PROBLEMS_KEPT = 64_000;

const LISTEN_WITHIN_MS = 120_000;

/** Starts `bun src/main.ts serve` and resolves once it logs that it listens (PORT=0: the port it picked). */
export async function startChildGateway(env: Record<string, string>): Promise<ChildGateway> {
  const proc = Bun.spawn(["bun", MAIN, "serve"], {
    // info: the "gateway listening" line carries the port.
    env: childEnv({ HOST: "127.0.0.1", PORT: "0", ...env, LOG_LEVEL: "info" }),
    stdout: "pipe",
    stderr: "pipe",
  });
  const reader = proc.stdout.getReader();
  const decoder = new TextDecoder();
  let seen = "";
  // The embedded defaults open PGlite in the background process before the serving one connects: on a loaded
  // machine that alone has taken over 60 s (PGlite's first start runs initdb in WebAssembly).
  const timer = setTimeout(() => proc.kill("SIGKILL"), LISTEN_WITHIN_MS);
  for (;;) {
    const { value, done } = await reader.read();
    if (done) {
      clearTimeout(timer);
      throw new Error(
        `child gateway exited or did not listen within ${LISTEN_WITHIN_MS / 1000} s: ${seen}${await new Response(proc.stderr).text()}`,
      );
    }
    seen += decoder.decode(value);
    const m = /"msg":"gateway listening".*?"url":"(http:\/\/[^"]+)"/.exec(seen);
    if (m) {
      clearTimeout(timer);
      // Keep reading both pipes so a full pipe never blocks the child's logging.
      void (async () => {
        while (!(await reader.read()).done);
      })().catch(() => {});
      let problems = "";
      void (async () => {
        const errs = (proc.stderr as ReadableStream<Uint8Array>).getReader();
        for (let r = await errs.read(); !r.done; r = await errs.read())
          problems = (problems + decoder.decode(r.value)).slice(-PROBLEMS_KEPT);
      })().catch(() => {});
      return {
        url: m[1]!,
        proc,
        async stop() {
          proc.kill("SIGTERM");
          return proc.exited;
        },
        problems: () => problems,
      };
    }
  }
}

/** The processes a gateway process started (its workers and its background process), by role. */
export function childProcesses(pid: number): { workers: number[]; background: number[] } {
  const out = Bun.spawnSync(["pgrep", "-P", String(pid)])
    .stdout.toString()
    .trim();
  const pids = out ? out.split("\n").map(Number) : [];
  const isBackground = (p: number) => {
    try {
      return readFileSync(`/proc/${p}/environ`, "utf8").split("\0").includes("GATEWAY_BACKGROUND=1");
    } catch {
      return false; // gone meanwhile
    }
  };
  const gateway = pids.filter((p) => {
    try {
      return readFileSync(`/proc/${p}/cmdline`, "utf8").includes("main.ts");
    } catch {
      return false;
    }
  });
  return { workers: gateway.filter((p) => !isBackground(p)), background: gateway.filter(isBackground) };
}
