/**
 * `bun src/main.ts serve` gives JavaScriptCore its heap hint itself (src/heapHint.ts): the process a supervisor
 * started, same pid, serves with BUN_JSC_forceRAMSize in its environment, however it was started; an operator's
 * own value is kept. The hint is 512 MiB, or the memory the process may use when that is less.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { totalmem } from "node:os";
import { freePort, startChildGateway, type ChildGateway } from "./helpers/child.ts";
import { sharedGateway } from "./helpers/gateway.ts";
import { HEAP_HINT_ENV, heapHintBytes } from "../src/heapHint.ts";

const gw = sharedGateway({}, { redisPort: freePort() });

/** A child gateway on the shared Redis and Postgres, stopped (SIGTERM) before the test ends, whatever happens. */
async function withChild(env: Record<string, string>, use: (child: ChildGateway) => Promise<void>): Promise<void> {
  const child = await startChildGateway({ ...gw.sharedEnv(), ...env });
  try {
    await use(child);
  } finally {
    expect(await child.stop()).toBe(0);
  }
}

/** The environment a running process was (last) executed with. */
function environOf(pid: number): Record<string, string> {
  const out: Record<string, string> = {};
  for (const kv of readFileSync(`/proc/${pid}/environ`, "utf8").split("\0")) {
    const i = kv.indexOf("=");
    if (i > 0) out[kv.slice(0, i)] = kv.slice(i + 1);
  }
  return out;
}

describe("the heap hint", () => {
  test("is 512 MiB on a machine with more, and never more than the process may use", () => {
    const limit = process.constrainedMemory?.() || totalmem();
    expect(heapHintBytes()).toBe(Math.min(512 * 2 ** 20, limit));
  });

  test("the process started as `bun src/main.ts serve` serves with it, under the pid it was started with", async () => {
    await withChild({}, async (child) => {
      expect(environOf(child.proc.pid)[HEAP_HINT_ENV]).toBe(String(heapHintBytes()));
      expect((await fetch(`${child.url}/health`)).status).toBe(200);
    });
  }, 60_000);

  test("an operator's value is kept as it is", async () => {
    await withChild({ [HEAP_HINT_ENV]: "1073741824" }, async (child) => {
      expect(environOf(child.proc.pid)[HEAP_HINT_ENV]).toBe("1073741824");
      expect((await fetch(`${child.url}/health`)).status).toBe(200);
    });
  }, 60_000);
});
