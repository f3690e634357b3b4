/**
 * Operator mistakes and broken dependencies: one line on stderr, a non-zero exit, nothing on stdout, and no
 * embedded service (redis-server child, a new empty ledger) left behind.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startEmbeddedRedis } from "../src/embedded/redis.ts";
import { processMentioning, runCli } from "./helpers/adminCli.ts";

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "gw-admin-err-"));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A fresh, empty DATA_DIR for one case. */
function emptyDir(name: string): string {
  const dir = join(root, name);
  mkdirSync(dir);
  return dir;
}

const WALLET = "0x" + "ab".repeat(20);
const lastLine = (s: string) => s.trim().split("\n").at(-1);
/** No stack trace: no "    at f (file:line)" frames, no "error:" dumps of objects. */
const noStack = (s: string) => expect(s).not.toMatch(/^\s+at .+:\d+/m);

describe("admin refuses rather than guessing", () => {
  test("no gateway data in DATA_DIR: refused, and no new empty ledger is created", async () => {
    const dataDir = join(emptyDir("elsewhere"), "data");
    const r = await runCli(["admin", "grant", WALLET, "1", "--reason", "x"], { cwd: root, env: { DATA_DIR: dataDir } });
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr).toBe(
      `no gateway data in ${dataDir} (embedded Redis and Postgres not found): run where the gateway runs, set DATA_DIR to its data directory, or set REDIS_URL and DATABASE_URL\n`,
    );
    expect(existsSync(dataDir)).toBe(false);
    expect(await processMentioning(dataDir)).toBe(false);
  }, 30_000);

  test("a wallet command on ./data, which no gateway serves, while a gateway serves data/dev: refused, naming it", async () => {
    // The repository after a start.sh run (./data has a ledger, stopped) while dev.sh serves data/dev: this test
    // process stands for that gateway, the owner of data/dev's embedded redis-server.
    const repo = emptyDir("repo");
    mkdirSync(join(repo, "data", "redis", "appendonlydir"), { recursive: true });
    mkdirSync(join(repo, "data", "postgres", "pgdata"), { recursive: true });
    const dev = join(repo, "data", "dev");
    const live = await startEmbeddedRedis(join(dev, "redis"), { persist: false });
    try {
      for (const args of [
        ["balance", WALLET],
        ["grant", WALLET, "1", "--reason", "x"],
        ["keys", "list", WALLET],
      ]) {
        const r = await runCli(["admin", ...args], { cwd: repo });
        expect(r).toEqual({
          code: 1,
          stdout: "",
          stderr: `no gateway serves DATA_DIR=${join(repo, "data")}, but the gateway with pid ${process.pid} serves ${dev}: set DATA_DIR=${dev} to work on its ledger (refused, so as not to read or change a ledger no gateway uses)\n`,
        });
      }
      expect(await processMentioning(join(repo, "data", "redis"))).toBe(false);
    } finally {
      await live.stop();
    }
  }, 30_000);

  test("run from another directory without DATA_DIR: the same refusal, naming ./data there", async () => {
    const cwd = emptyDir("cwd");
    const r = await runCli(["admin", "balance", WALLET], { cwd });
    expect(r).toMatchObject({ code: 1, stdout: "" });
    expect(r.stderr).toStartWith(`no gateway data in ${join(cwd, "data")} `);
    expect(readdirSync(cwd)).toEqual([]);
  }, 30_000);

  test.each([
    [["grant", "0x12", "1", "--reason", "x"], "wallet must be a 0x address", "usage: admin grant"],
    [["grant", WALLET, "1"], "--reason is required: grants are audited", "usage: admin grant"],
    [["balance"], "wallet must be a 0x address", "usage: admin balance"],
    [["keys", "revoke", "1e3"], "id must be a key id (a positive integer)", "usage: admin keys revoke"],
    [["keys", "list", WALLET, "extra"], 'unexpected argument "extra"', "usage: admin keys list"],
    [["keys"], 'unknown admin command "keys"', "usage: bun src/main.ts admin"],
    [[], "usage: bun src/main.ts admin", "admin keys revoke"],
  ])(
    "usage mistake %p: exit 2, the reason and the usage on stderr",
    async (args, reason, usage) => {
      const r = await runCli(["admin", ...args], { cwd: root });
      expect(r.code).toBe(2);
      expect(r.stdout).toBe("");
      expect(r.stderr).toStartWith(reason);
      expect(r.stderr).toContain(usage);
    },
    30_000,
  );

  test("unknown top-level command: exit 2 with the usage", async () => {
    const r = await runCli(["serv"], { cwd: root });
    expect(r).toMatchObject({ code: 2, stdout: "" });
    expect(r.stderr).toStartWith('unknown command "serv"');
  });

  test("Redis and Postgres down: one line naming Redis, exit 1", async () => {
    const r = await runCli(["admin", "balance", WALLET], {
      cwd: root,
      env: { REDIS_URL: "redis://:hunter2@127.0.0.1:1", DATABASE_URL: "postgres://u:hunter2@127.0.0.1:1/db" },
    });
    expect(r).toMatchObject({ code: 1, stdout: "" });
    expect(lastLine(r.stderr)).toBe("Redis at 127.0.0.1:1 is not reachable (ECONNREFUSED); check REDIS_URL or that redis-server runs");
    expect(r.stderr).not.toContain("hunter2");
    noStack(r.stderr);
  }, 30_000);
});

describe("serve fails in one line and leaves nothing running", () => {
  test("a port already in use: one line, nothing started (no embedded service, no data dir)", async () => {
    const taken = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("taken") });
    const dataDir = join(emptyDir("port"), "data");
    try {
      const r = await runCli(["serve"], { cwd: root, env: { DATA_DIR: dataDir, HOST: "127.0.0.1", PORT: String(taken.port) } });
      expect(r.code).toBe(1);
      expect(r.stdout).toBe("");
      expect(r.stderr).toBe(`port ${taken.port} on 127.0.0.1 is already in use; stop the other process or set PORT\n`);
      expect(existsSync(dataDir)).toBe(false);
      expect(await processMentioning(dataDir)).toBe(false);
    } finally {
      await taken.stop(true);
    }
  }, 30_000);

  test("Postgres down with the embedded Redis: one line naming Postgres, and the redis-server child is stopped", async () => {
    const dataDir = join(emptyDir("pgdown"), "data");
    const r = await runCli(["serve"], {
      cwd: root,
      env: { DATA_DIR: dataDir, HOST: "127.0.0.1", PORT: "0", DATABASE_URL: "postgres://u:hunter2@127.0.0.1:1/db" },
    });
    expect(r.code).toBe(1);
    expect(lastLine(r.stderr)).toBe("Postgres at 127.0.0.1:1 is not reachable (ECONNREFUSED); check DATABASE_URL or that Postgres runs");
    expect(r.stdout + r.stderr).not.toContain("hunter2");
    noStack(r.stderr);
    // The redis-server had been started (its log is there) and is gone again.
    expect(existsSync(join(dataDir, "redis"))).toBe(true);
    expect(await processMentioning(dataDir)).toBe(false);
  }, 30_000);
});
