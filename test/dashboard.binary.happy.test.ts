import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { freshDatabase } from "./helpers/services.ts";
import { HEAP_HINT_ENV, heapHintBytes } from "../src/heapHint.ts";

// The single binary (`bun build --compile`, as `bun run build` makes it) carries the dashboard: started from an
// empty directory, with no source tree beside it, it serves the page and its script.
const ROOT = resolve(import.meta.dir, "..");
const dir = mkdtempSync(join(tmpdir(), "gw-binary-"));
let proc: ReturnType<typeof Bun.spawn> | undefined;
let db: Awaited<ReturnType<typeof freshDatabase>> | undefined;

afterAll(async () => {
  proc?.kill("SIGTERM");
  await proc?.exited;
  await db?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test("the compiled gateway serves the dashboard from inside the binary", async () => {
  const binary = join(dir, "gateway");
  const build = Bun.spawnSync(["bun", "build", "--compile", "--minify", join(ROOT, "src/main.ts"), "--outfile", binary], {
    cwd: ROOT,
    stderr: "pipe",
  });
  expect(build.exitCode).toBe(0);

  // On the test Postgres when there is one (a fresh embedded one takes long to initialise on a busy machine).
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? "",
    PORT: "0",
    HOST: "127.0.0.1",
    DATA_DIR: join(dir, "data"),
    LOG_LEVEL: "info",
  };
  if (process.env.TEST_DATABASE_URL) {
    db = await freshDatabase();
    env.DATABASE_URL = db.database.url;
  }
  proc = Bun.spawn([binary, "serve"], {
    cwd: dir,
    env,
    stdout: "pipe",
    stderr: "pipe",
  });
  // The listening line names the port the system chose.
  const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  let seen = "";
  let url: string | undefined;
  while (!url) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`gateway exited: ${seen.slice(-500)}`);
    seen += new TextDecoder().decode(value);
    url = /"msg":"gateway listening","url":"(http:\/\/[^"]+)"/.exec(seen)?.[1];
  }
  void (async () => {
    while (!(await reader.read()).done);
  })().catch(() => {});

  const page = await fetch(`${url}/`);
  expect(page.status).toBe(200);
  const html = await page.text();
  expect(html).toContain("Connect a wallet");
  const src = /<script type="module" src="(\/dashboard\/app\.[0-9a-f]{16}\.js)"/.exec(html)?.[1];
  expect(src).toBeDefined();
  const js = await fetch(`${url}${src}`, { headers: { "accept-encoding": "identity" } });
  expect(js.status).toBe(200);
  expect(js.headers.get("content-type")).toContain("text/javascript");
  const size = (await js.arrayBuffer()).byteLength;
  expect(size).toBeGreaterThan(10_000);
  expect(size).toBeLessThan(200 * 1024);
}, 120_000);

// The binary gives JavaScriptCore its heap hint itself, as `bun src/main.ts serve` does (test/serve.heaphint.happy):
// the process started above, same pid, was executed again with it.
test("the compiled gateway serves with the heap hint in its environment", () => {
  expect(proc?.exitCode).toBeNull();
  const environ = readFileSync(`/proc/${proc!.pid}/environ`, "utf8").split("\0");
  expect(environ).toContain(`${HEAP_HINT_ENV}=${heapHintBytes()}`);
});
