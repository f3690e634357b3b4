/**
 * The embedded Postgres's data directory is made by a process of its own (src/embedded/postgres.ts) and appears
 * whole or not at all: what an initdb killed midway left (its `.init-<pid>` folder) is removed by the next start,
 * and the database then opened serves queries with the embedded memory settings, which also apply to a data
 * directory made before (they are on PGlite's command line, not in its postgresql.conf). Real PGlite (the engine a
 * DATA_DIR without native Postgres binaries gets, and one that already holds PGlite's data keeps).
 */
import { afterAll, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PGLITE_SETTINGS, startEmbeddedPostgres } from "../src/embedded/postgres.ts";
import { openDatabase } from "../src/store/db.ts";

const dir = mkdtempSync(join(tmpdir(), "pgl-initdb-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

test("an initdb killed midway is done again whole; the embedded settings hold on the first start and the next", async () => {
  // What a killed initdb process leaves: its own folder, half written, under a pid no longer running.
  const stale = join(dir, "pgdata.init-2147483646");
  mkdirSync(join(stale, "base"), { recursive: true });
  writeFileSync(join(stale, "postgresql.conf"), "half written");

  for (const start of ["first", "again"]) {
    const pg = await startEmbeddedPostgres(dir, { engine: "pglite" });
    const sql = openDatabase(pg.url, { path: pg.path, max: 1 });
    try {
      const [row] = await sql<{ shared_buffers: string; max_connections: string; maintenance_work_mem: string }[]>`
        SELECT current_setting('shared_buffers') AS shared_buffers, current_setting('max_connections') AS max_connections,
               current_setting('maintenance_work_mem') AS maintenance_work_mem`;
      expect({ start, ...row }).toEqual({
        start,
        shared_buffers: PGLITE_SETTINGS.shared_buffers,
        max_connections: PGLITE_SETTINGS.max_connections,
        maintenance_work_mem: PGLITE_SETTINGS.maintenance_work_mem,
      });
    } finally {
      await sql.end({ timeout: 1 });
      await pg.stop();
    }
    expect(existsSync(join(dir, "pgdata", "PG_VERSION"))).toBe(true);
    expect(readdirSync(dir).filter((f) => f.startsWith("pgdata"))).toEqual(["pgdata"]);
  }
}, 120_000);
