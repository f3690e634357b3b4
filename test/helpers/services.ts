import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { startEmbeddedPostgres } from "../../src/embedded/postgres.ts";
import { startEmbeddedRedis, type EmbeddedRedis } from "../../src/embedded/redis.ts";
import type { Connections } from "../../src/wiring.ts";

/**
 * A private redis-server for one test file (or a benchmark run), on its own socket (and `port`, if given), so a
 * test may flush or kill it.
 */
export async function privateRedis(opts: { port?: number } = {}): Promise<EmbeddedRedis & { dir: string }> {
  const dir = mkdtempSync(join(tmpdir(), "gw-redis-"));
  const r = await startEmbeddedRedis(dir, { persist: false, port: opts.port });
  return { ...r, dir, stop: async () => (await r.stop(), rmSync(dir, { recursive: true, force: true })) };
}

/** A new, empty database `<prefix>_<unique>` on the Postgres server of `adminUrl`; `stop` drops it. */
export async function newDatabase(adminUrl: string, prefix: string): Promise<{ url: string; name: string; stop(): Promise<void> }> {
  const name = `${prefix}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`;
  const sql = postgres(adminUrl, { max: 1, onnotice: () => {} });
  await sql.unsafe(`CREATE DATABASE ${name}`);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    name,
    async stop() {
      await sql.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await sql.end();
    },
  };
}

/**
 * A fresh, empty database for one test file: a new database on the Postgres of TEST_DATABASE_URL when set
 * (CI sets it to the machine's Postgres), else an in-memory PGlite.
 */
export async function freshDatabase(): Promise<{ database: Connections["database"]; stop(): Promise<void> }> {
  const admin = process.env.TEST_DATABASE_URL;
  if (!admin) {
    const pg = await startEmbeddedPostgres();
    return { database: { url: pg.url, path: pg.path, max: pg.maxConnections }, stop: pg.stop };
  }
  const db = await newDatabase(admin, "gw_test");
  return { database: { url: db.url, max: 10 }, stop: db.stop };
}
