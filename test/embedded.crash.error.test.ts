/**
 * The embedded defaults after a crash: a gateway killed with kill -9 (its serving process and its background process,
 * which owns the embedded services, as a crash of the machine's container would) leaves its embedded redis-server
 * running and PGlite's unix socket file behind in DATA_DIR; started again on the same DATA_DIR it takes the one over (its
 * SIGTERM stops it, so nothing is left running) and listens on the other anew, and serves.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { childProcesses, startChildGateway } from "./helpers/child.ts";

const dataDir = mkdtempSync(join(tmpdir(), "gw-crash-"));

afterAll(() => {
  // Only if the test failed before the second gateway stopped the redis-server it took over.
  Bun.spawnSync(["redis-cli", "-s", join(dataDir, "redis", "redis.sock"), "SHUTDOWN", "NOSAVE"]);
  rmSync(dataDir, { recursive: true, force: true });
});

const redisCli = (...args: string[]) =>
  Bun.spawnSync(["redis-cli", "-s", join(dataDir, "redis", "redis.sock"), ...args])
    .stdout.toString()
    .trim();

test("a gateway killed with kill -9 starts again on its DATA_DIR, serves, and its SIGTERM stops the redis-server too", async () => {
  const first = await startChildGateway({ DATA_DIR: dataDir });
  expect((await fetch(`${first.url}/health`)).status).toBe(200);
  const [background] = childProcesses(first.proc.pid).background;
  expect(background).toBeDefined();
  process.kill(background!, "SIGKILL");
  first.proc.kill("SIGKILL");
  await first.proc.exited;
  // The first gateway's redis-server is still there, now nobody's.
  expect(redisCli("PING")).toBe("PONG");

  const second = await startChildGateway({ DATA_DIR: dataDir });
  try {
    const health = await fetch(`${second.url}/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: "ok", redis: "up", postgres: "up" });
  } finally {
    expect(await second.stop()).toBe(0);
  }
  expect(redisCli("PING")).not.toBe("PONG");
}, 180_000);
