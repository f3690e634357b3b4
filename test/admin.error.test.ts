/**
 * The admin command with a dependency down prints one line naming it (no stack trace) and exits non-zero,
 * within its start-up deadline. Runs the real entry point as a process.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freshDatabase } from "./helpers/services.ts";

let db: Awaited<ReturnType<typeof freshDatabase>>;
beforeAll(async () => {
  db = await freshDatabase();
}, 60_000);
afterAll(async () => {
  await db?.stop();
});

async function admin(env: Record<string, string>, args: string[]) {
  const started = Date.now();
  const dataDir = mkdtempSync(join(tmpdir(), "gw-admin-"));
  const proc = Bun.spawn(["bun", "src/main.ts", "admin", ...args], {
    env: { PATH: process.env.PATH!, HOME: process.env.HOME ?? "/tmp", DATA_DIR: dataDir, LOG_LEVEL: "error", ...env },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [code, stdout, stderr] = await Promise.all([proc.exited, new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
  // JSON lines are the process log (configuration warnings, the Redis client's one line per outage); what the
  // operator is told is the rest.
  const told = stderr.split("\n").filter((l) => l.trim() && !l.startsWith("{"));
  return { code, stdout, stderr, told, dataDir, ms: Date.now() - started };
}

describe("admin with a dependency down", () => {
  test("Redis down: one line naming Redis, exit 1", async () => {
    // Postgres: the test database (TEST_DATABASE_URL), else the command's own embedded PGlite.
    const database: Record<string, string> = process.env.TEST_DATABASE_URL ? { DATABASE_URL: db.database.url } : {};
    const r = await admin({ REDIS_URL: "redis://127.0.0.1:1", ...database }, ["referrals"]);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.told).toHaveLength(1);
    expect(r.told[0]).toMatch(/^admin: Redis/);
    expect(r.ms).toBeLessThan(15_000);
    expect(r.stderr).not.toContain("    at ");
  }, 30_000);

  test("Postgres down: one line naming Postgres, exit 1", async () => {
    // No REDIS_URL: the command starts its embedded redis-server, and must stop it again.
    const r = await admin({ DATABASE_URL: "postgres://postgres@127.0.0.1:1/postgres" }, ["referrals"]);
    expect(r.code).toBe(1);
    expect(r.told).toEqual([expect.stringMatching(/^admin: Postgres is unreachable: /)]);
    expect(Bun.spawnSync(["pgrep", "-f", `${r.dataDir}/redis`]).exitCode).toBe(1); // no redis-server left behind
    expect(r.stderr).not.toContain("    at ");
  }, 20_000);
});
