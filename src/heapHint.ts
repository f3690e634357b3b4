/**
 * JavaScriptCore sizes its heap growth by the machine's RAM: on a machine with 16 GiB or more it lets the heap grow
 * to about four times what survived the last full collection before collecting again, so a busy gateway holds far
 * more garbage than live data (docs/benchmarks.md, "Memory"). Told a smaller RAM size (BUN_JSC_forceRAMSize) it grows
 * the heap by 1.5–2× instead. JSC reads that option once, from the environment, before any JavaScript runs, so a
 * process can only give it to itself by executing itself again in place (execve: same pid, same open descriptors,
 * nothing else kept): this file, the entry's first step, before anything else is loaded.
 */
import { totalmem } from "node:os";

/** The variable JSC reads; an operator's value (or ours, after the exec) is left as it is. */
export const HEAP_HINT_ENV = "BUN_JSC_forceRAMSize";
/** 512 MiB: peak RSS under the bench's load ~190 → ~140 MiB, no measured CPU cost (docs/benchmarks.md). */
const HINT_BYTES = 512 * 2 ** 20;

/** The hint for this machine: 512 MiB, or less when the process may use less (a container's memory limit). */
export function heapHintBytes(): number {
  const limit = process.constrainedMemory?.() || totalmem();
  return Math.min(HINT_BYTES, limit > 0 ? limit : HINT_BYTES);
}

/** The command line that starts this process again: the compiled binary, or bun with its own flags and the entry. */
export function ownCommand(): string[] {
  return Bun.main.startsWith("/$bunfs/")
    ? [process.execPath, ...process.argv.slice(2)]
    : [process.execPath, ...process.execArgv, ...process.argv.slice(1)];
}

/**
 * Runs this process again with the heap hint when it is not set yet: does not return then. Returns when the hint
 * is already there (set by an operator, or by this exec), or when the platform cannot exec; the gateway then runs
 * with JSC's own sizing, as before.
 */
export function execWithHeapHint(): void {
  if (process.env[HEAP_HINT_ENV] !== undefined || typeof process.execve !== "function") return;
  const argv = ownCommand();
  try {
    process.execve(argv[0]!, argv, { ...process.env, [HEAP_HINT_ENV]: String(heapHintBytes()) });
  } catch {
    // Not fatal: the process keeps running, only without the hint.
  }
}
