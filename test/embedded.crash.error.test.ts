/**
 * The embedded defaults after a crash: a gateway killed with kill -9 (its serving process and its background process,
 * which owns the embedded services, as a crash of the machine's container would) leaves its embedded redis-server
 * running, and its native Postgres (or PGlite's unix socket file) behind in DATA_DIR; started again on the same
 * DATA_DIR it takes them over (its SIGTERM stops them, so nothing is left running) and serves.
 */
import { afterAll, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { alive } from "../src/embedded/redis.ts";
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
  // The first gateway's redis-server is still there, now nobody's, and so is its native Postgres.
  expect(redisCli("PING")).toBe("PONG");
  const postmaster = nativePostmaster();
  if (postmaster) expect(alive(postmaster)).toBe(true);

  const second = await startChildGateway({ DATA_DIR: dataDir });
  try {
    const health = await fetch(`${second.url}/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: "ok", redis: "up", postgres: "up" });
  } finally {
    expect(await second.stop()).toBe(0);
  }
  expect(redisCli("PING")).not.toBe("PONG");
  // The postmaster taken over is stopped with it (a clean shutdown removes its pid file).
  if (postmaster) expect(alive(postmaster)).toBe(false);
  expect(existsSync(join(dataDir, "postgres", "native", "postmaster.pid"))).toBe(false);
}, 180_000);

/** The native embedded Postgres's postmaster (undefined on PGlite, where the binaries do not run). */
function nativePostmaster(): number | undefined {
  try {
    return Number(readFileSync(join(dataDir, "postgres", "native", "postmaster.pid"), "utf8").split("\n")[0]);
  } catch {
    return undefined;
  }
}
