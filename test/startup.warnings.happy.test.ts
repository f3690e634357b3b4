/**
 * "top-ups are disabled" is said once, where it matters: by `serve` at start (its POST /v1/topup answers 503),
 * never by an admin command, whose stderr stays empty.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, runMain, spawnMain } from "./helpers/child.ts";
import { freshDatabase, privateRedis } from "./helpers/services.ts";

const WARNING = "top-ups are disabled";
let redis: Awaited<ReturnType<typeof privateRedis>>;
let db: Awaited<ReturnType<typeof freshDatabase>> | undefined;
let dir: string;
let env: Record<string, string>;

beforeAll(async () => {
  const port = freePort();
  redis = await privateRedis({ port });
  dir = mkdtempSync(join(tmpdir(), "gw-warnings-"));
  const models = join(dir, "models.json");
  writeFileSync(models, JSON.stringify({ providers: {}, models: [] }));
  // No payment settings: top-ups are off. On the machine's Postgres when there is one, else embedded in DATA_DIR.
  env = { REDIS_URL: `redis://127.0.0.1:${port}`, MODELS_FILE: models, DATA_DIR: join(dir, "data") };
  if (process.env.TEST_DATABASE_URL) {
    db = await freshDatabase();
    env.DATABASE_URL = db.database.url;
  }
}, 60_000);
afterAll(async () => {
  await redis?.stop();
  await db?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test("serve warns once that top-ups are disabled and answers 503 for them; admin commands say nothing", async () => {
  const port = freePort();
  const gateway = spawnMain(["serve"], { ...env, HOST: "127.0.0.1", PORT: String(port), LOG_LEVEL: "info" });
  try {
    await gateway.waitFor(/"msg":"gateway listening"/);
    const topup = await fetch(`http://127.0.0.1:${port}/v1/topup`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ amount: 5 }),
    });
    expect(topup.status).toBe(503);
    const balance = await runMain(["admin", "balance", "0x000000000000000000000000000000000000dead"], env);
    // An admin command says which ledger it opened (issue 34.5), and nothing else: no payment warning.
    const ledgerLine = /^ledger: Redis at 127\.0\.0\.1:\d+[,;] Postgres [^\n]+\n$/;
    expect(balance.code).toBe(0);
    expect(balance.stderr).toMatch(ledgerLine);
    expect(balance.stdout).toContain("0.000000");
    const referrals = await runMain(["admin", "referrals"], env);
    expect(referrals.code).toBe(0);
    expect(referrals.stderr).toMatch(ledgerLine);
  } finally {
    gateway.proc.kill("SIGTERM");
  }
  const out = await gateway.done;
  expect(out.code).toBe(0);
  const warnings = (out.stdout + out.stderr).split("\n").filter((l) => l.includes(WARNING));
  expect(warnings).toHaveLength(1);
  expect(JSON.parse(warnings[0]!)).toMatchObject({
    level: "warn",
    msg: "top-ups are disabled: set PAY_TO, a facilitator and (on a local chain) ASSETS_FILE",
  });
}, 60_000);
