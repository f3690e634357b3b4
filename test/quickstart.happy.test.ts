/**
 * The README's quick start as a newcomer runs it, on a port other than the default: with no provider configured,
 * `serve` (what scripts/start.sh runs once set up) serves local/echo, says so at start and in GET /v1/models, and
 * examples/quickstart.sh (the README's block: sign in, grant, curl) gets a chat answered and charged.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { freePort, spawnMain } from "./helpers/child.ts";
import { freshDatabase } from "./helpers/services.ts";

const ROOT = resolve(import.meta.dir, "..");
const PORT = freePort();
let dir: string;
let db: Awaited<ReturnType<typeof freshDatabase>> | undefined;
let env: Record<string, string>;
let gateway: ReturnType<typeof spawnMain> | undefined;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "gw-quickstart-"));
  // Nothing but what a fresh shell has: no provider key, no MODELS_FILE.
  env = { PORT: String(PORT), DATA_DIR: join(dir, "data"), LOG_LEVEL: "info" };
  // The machine's Postgres when there is one (a fresh embedded one takes long to initialise on a busy machine).
  if (process.env.TEST_DATABASE_URL) {
    db = await freshDatabase();
    env.DATABASE_URL = db.database.url;
  }
  gateway = spawnMain(["serve"], env);
  await gateway.waitFor(/"msg":"gateway listening"/);
}, 60_000);
afterAll(async () => {
  gateway?.proc.kill("SIGTERM");
  await gateway?.done;
  await db?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test("with no provider configured the first start serves local/echo and says so", async () => {
  const log = logLines().find((l) => l.msg.startsWith("no provider is configured"));
  expect(log).toMatchObject({ level: "warn" });
  expect(log!.msg).toContain("serving local/echo, a local test model");
  expect(log!.msg).toContain("OPENAI_API_KEY");
  const models = await (await fetch(`http://localhost:${PORT}/v1/models`)).json();
  expect(models.data).toEqual([
    {
      id: "local/echo",
      object: "model",
      kind: "chat",
      name: "Local test model (echoes your last message; set a provider key for real models)",
      provider: "local",
      contextLength: 32768,
      promptPricePer1MTokens: 1,
      completionPricePer1M: 2,
      aliases: [],
      available: true,
    },
  ]);
});

test("examples/quickstart.sh: sign in, grant, curl; the chat answers and is charged", async () => {
  const run = Bun.spawn(["bash", "-c", `set -e; source examples/quickstart.sh; echo; echo "WALLET=$WALLET KEY=$KEY"`], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...env, LOG_LEVEL: "" },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [out, err, code] = await Promise.all([new Response(run.stdout).text(), new Response(run.stderr).text(), run.exited]);
  expect({ code, err: code === 0 ? "" : err }).toEqual({ code: 0, err: "" });
  const lines = out.trim().split("\n");
  const [, wallet, key] = /^WALLET=(0x[0-9a-f]{40}) KEY=(\S+)$/.exec(lines.at(-1)!)!;
  const answer = JSON.parse(lines.at(-2)!);
  expect(answer).toMatchObject({
    object: "chat.completion",
    model: "local/echo",
    choices: [{ message: { role: "assistant", content: "echo: Hello, gateway" } }],
    usage: { prompt_tokens: 5, completion_tokens: 3 },
  });
  // 5 prompt tokens at 1 USD/M and 3 completion tokens at 2 USD/M: 11 µUSDC of the 5 USD granted.
  const balance = await (
    await fetch(`http://localhost:${PORT}/v1/balance/${wallet}`, { headers: { authorization: `Bearer ${key}` } })
  ).json();
  expect(balance).toEqual({ wallet, available_usdc: 5_000_000 - 11 });
}, 60_000);

/** The gateway's JSON log lines so far. */
function logLines(): { level: string; msg: string }[] {
  return gateway!
    .printed()
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l));
}
