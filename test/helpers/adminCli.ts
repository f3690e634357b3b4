import { join } from "node:path";

const MAIN = join(import.meta.dir, "../../src/main.ts");

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs `bun src/main.ts <args>` as an operator would: a child process in `cwd`, with only the environment given
 * (plus PATH and HOME), so nothing of the test's own configuration leaks in.
 */
export async function runCli(args: string[], opts: { cwd: string; env?: Record<string, string> }): Promise<CliResult> {
  const child = Bun.spawn(["bun", MAIN, ...args], {
    cwd: opts.cwd,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...opts.env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { code, stdout, stderr };
}

/** Whether any process's command line mentions `needle` (an embedded redis-server of a data dir, say). */
export async function processMentioning(needle: string): Promise<boolean> {
  const p = Bun.spawn(["pgrep", "-f", needle], { stdout: "ignore", stderr: "ignore" });
  return (await p.exited) === 0;
}
