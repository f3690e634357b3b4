import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { connect } from "node:net";
import { join } from "node:path";
// Imported as files so `bun build --compile` embeds PGlite's runtime in the binary (it cannot find them on disk).
import initdbWasm from "@electric-sql/pglite/initdb.wasm" with { type: "file" };
import pgliteData from "@electric-sql/pglite/pglite.data" with { type: "file" };
import pgliteWasm from "@electric-sql/pglite/pglite.wasm" with { type: "file" };

/** An embedded Postgres (PGlite) served on a unix socket so postgres.js talks to it unchanged. */
export interface EmbeddedPostgres {
  url: string;
  /** Unix socket postgres.js connects through (the url alone cannot carry it). */
  path: string;
  /** How many pooled connections make sense: PGlite runs one query at a time. */
  maxConnections: number;
  stop(): Promise<void>;
}

function socketAlive(path: string): Promise<boolean> {
  if (!existsSync(path)) return Promise.resolve(false);
  return new Promise((resolve) => {
    const s = connect(path);
    s.once("connect", () => (s.destroy(), resolve(true)));
    s.once("error", () => resolve(false));
  });
}

/**
 * Opens PGlite in `dir` (or in memory when dir is undefined) behind pglite-socket. If another process already
 * serves the same dir, joins it instead: PGlite's files admit one process at a time.
 */
export async function startEmbeddedPostgres(dir?: string): Promise<EmbeddedPostgres> {
  const socketDir = dir ?? mkdtempSync(join(tmpdir(), "pgl-"));
  mkdirSync(socketDir, { recursive: true });
  const socket = join(socketDir, ".s.PGSQL.5432");
  const url = "postgres://postgres@localhost/postgres";
  if (await socketAlive(socket)) return { url, path: socket, maxConnections: 4, stop: async () => {} };
  // A socket file nobody answers on is a dead process's (kill -9, a crash): listening again needs it gone.
  rmSync(socket, { force: true });

  const { PGlite } = await import("@electric-sql/pglite");
  const { PGLiteSocketServer } = await import("@electric-sql/pglite-socket");
  const [pgliteWasmModule, initdbWasmModule] = await Promise.all(
    [pgliteWasm, initdbWasm].map(async (f) => WebAssembly.compile(await Bun.file(f).arrayBuffer())),
  );
  const db = await PGlite.create({
    dataDir: dir ? join(dir, "pgdata") : undefined,
    pgliteWasmModule,
    initdbWasmModule,
    fsBundle: Bun.file(pgliteData),
  });
  const server = new PGLiteSocketServer({ db, path: socket, maxConnections: 64 });
  await server.start();
  return {
    url,
    path: socket,
    maxConnections: 4,
    stop: async () => {
      await server.stop();
      await db.close();
    },
  };
}
