/**
 * The embedded defaults after a crash: a gateway killed with kill -9 leaves its embedded redis-server running and
 * PGlite's unix socket file behind in DATA_DIR; started again on the same DATA_DIR it joins the one and listens on
 * the other anew, and serves.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startChildGateway } from "./helpers/child.ts";

const dataDir = mkdtempSync(join(tmpdir(), "gw-crash-"));

afterAll(() => {
  // The embedded redis-server outlives a killed gateway by design (the next one joins it); the test stops it.
  Bun.spawnSync(["redis-cli", "-s", join(dataDir, "redis", "redis.sock"), "SHUTDOWN", "NOSAVE"]);
  rmSync(dataDir, { recursive: true, force: true });
});

test("a gateway killed with kill -9 starts again on its DATA_DIR and serves", async () => {
  const first = await startChildGateway({ DATA_DIR: dataDir });
  expect((await fetch(`${first.url}/health`)).status).toBe(200);
  first.proc.kill("SIGKILL");
  await first.proc.exited;

  const second = await startChildGateway({ DATA_DIR: dataDir });
  try {
    const health = await fetch(`${second.url}/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: "ok", redis: "up", postgres: "up" });
  } finally {
    await second.stop();
  }
}, 120_000);
