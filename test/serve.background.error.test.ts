/**
 * The background process of the default `bun src/main.ts serve` (no REDIS_URL / DATABASE_URL): it owns the embedded
 * redis-server and Postgres (native, or PGlite) and runs the flusher, the sweeper and the repair jobs, so that the serving
 * process only serves. Killed with -9 under load it is started again and serving goes on meanwhile, every answer's
 * charge reaching Postgres; a serving process killed with -9 leaves it to drain the outbox and stop, and nothing an
 * answer was received for is lost.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { privateKeyToAccount, generatePrivateKey } from "viem/accounts";
import { type ChildGateway, childProcesses, freePort, runMain, startChildGateway } from "./helpers/child.ts";
import { expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { usageFor } from "./helpers/openaiStandin.ts";

// The test's gateway only lends its stand-in provider, catalog and SIWE settings: the children run on DATA_DIR.
const gw = sharedGateway({}, { redisPort: freePort() });
const dirs: string[] = [];
const charge = expectedCharge(usageFor(1).prompt_tokens, usageFor(1).completion_tokens);
const body = JSON.stringify({ model: "standin/echo", messages: [{ role: "user", content: "hello" }], max_tokens: 16 });

afterAll(() => {
  for (const dir of dirs) {
    Bun.spawnSync(["redis-cli", "-s", join(dir, "redis", "redis.sock"), "SHUTDOWN", "NOSAVE"]); // only after a failure
    rmSync(dir, { recursive: true, force: true });
  }
});

function embeddedEnv(dataDir: string): Record<string, string> {
  const { REDIS_URL: _r, DATABASE_URL: _d, ...rest } = gw.sharedEnv();
  return { ...rest, DATA_DIR: dataDir, RATE_LIMIT_REQUESTS: "1000000" };
}

/** A wallet with a key (SIWE sign-in against the child) and `usd` granted by the admin command. */
async function wallet(child: ChildGateway, env: Record<string, string>, usd: number): Promise<{ wallet: string; key: string }> {
  const account = privateKeyToAccount(generatePrivateKey());
  const res = await fetch(`${child.url}/v1/auth/keys`, {
    method: "POST",
    headers: { "content-type": "application/json", host: "gateway.test" },
    body: JSON.stringify({ ...(await gw.signIn(account)), label: "test" }),
  });
  expect(res.status).toBe(201);
  const { key } = (await res.json()) as { key: string };
  const grant = await runMain(["admin", "grant", account.address, String(usd), "--reason", "test"], env);
  expect(grant.code).toBe(0);
  return { wallet: account.address.toLowerCase(), key };
}

/** Charges Postgres holds for the wallet, read through the embedded Postgres's socket. */
async function charges(dataDir: string, wallet: string): Promise<{ n: number; total: number }> {
  const sql = postgres("postgres://postgres@localhost/postgres", { path: join(dataDir, "postgres", ".s.PGSQL.5432"), max: 1 });
  try {
    const [r] = await sql<{ n: number; total: number }[]>`
      SELECT count(*)::int AS n, COALESCE(sum(amount_usdc), 0)::bigint AS total FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge'`;
    return { n: r!.n, total: Number(r!.total) };
  } finally {
    await sql.end({ timeout: 1 });
  }
}

interface Traffic {
  statuses: number[];
  stop(): void;
  done: Promise<void>;
}

/** `loops` clients sending chat completions one after another until stopped; status 0 = cut off (no answer). */
function traffic(url: string, key: string, loops: number): Traffic {
  const statuses: number[] = [];
  let stopped = false;
  const done = Promise.all(
    Array.from({ length: loops }, async () => {
      while (!stopped) {
        const status = await fetch(`${url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body,
        })
          .then(async (r) => (await r.arrayBuffer(), r.status))
          .catch(() => 0);
        statuses.push(status);
        if (status === 0) return;
      }
    }),
  ).then(() => {});
  return { statuses, stop: () => (stopped = true), done };
}

async function until(check: () => Promise<boolean> | boolean, ms: number): Promise<boolean> {
  for (const deadline = Date.now() + ms; Date.now() < deadline; await Bun.sleep(20)) if (await check()) return true;
  return check();
}

describe("the background process", () => {
  test("killed with -9 under load: started again, serving goes on meanwhile, every answer charged once in Postgres", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "gw-bg-"));
    dirs.push(dataDir);
    const env = embeddedEnv(dataDir);
    const child = await startChildGateway(env);
    try {
      const [first] = childProcesses(child.proc.pid).background;
      expect(first).toBeDefined();
      const { wallet: w, key } = await wallet(child, env, 10);
      const load = traffic(child.url, key, 8);
      expect(await until(() => load.statuses.length >= 50, 10_000)).toBe(true);
      process.kill(first!, "SIGKILL");
      // A new one (the native postmaster and the redis-server adopted, or PGlite opened again on DATA_DIR) while the requests go on.
      expect(await until(() => childProcesses(child.proc.pid).background.some((p) => p !== first), 30_000)).toBe(true);
      const before = load.statuses.length;
      expect(await until(() => load.statuses.length >= before + 50, 10_000)).toBe(true);
      load.stop();
      await load.done;
      expect(load.statuses.every((s) => s === 200)).toBe(true);
      const served = load.statuses.length;
      // The new background process's flusher moves them, what the dead one had read first (the same consumer name).
      // (PGlite, the fallback, takes seconds to open again: until then its socket refuses.)
      const counted = () => charges(dataDir, w).catch(() => ({ n: -1, total: 0 }));
      expect(await until(async () => (await counted()).n >= served, 60_000)).toBe(true);
      expect(await charges(dataDir, w)).toEqual({ n: served, total: served * charge });
    } finally {
      expect(await child.stop()).toBe(0);
    }
  }, 180_000);

  test("a serving process killed with -9: the background process drains the outbox and stops; every received answer charged once", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "gw-bg-"));
    dirs.push(dataDir);
    const env = embeddedEnv(dataDir);
    const child = await startChildGateway(env);
    const [background] = childProcesses(child.proc.pid).background;
    expect(background).toBeDefined();
    const { wallet: w, key } = await wallet(child, env, 10);
    const load = traffic(child.url, key, 8);
    expect(await until(() => load.statuses.length >= 100, 10_000)).toBe(true);
    child.proc.kill("SIGKILL");
    await child.proc.exited;
    await load.done;
    // Its primary gone, the background process drains and stops the embedded services: nothing is left running.
    expect(await until(() => !alive(background!), 30_000)).toBe(true);
    const received = load.statuses.filter((s) => s === 200).length;
    const cut = load.statuses.filter((s) => s !== 200);
    expect(cut.every((s) => s === 0)).toBe(true);

    const again = await startChildGateway(env);
    try {
      // A settle the dead process had on its Redis connection may have run after the drain: it waits in the outbox
      // (Redis's append-only file) for the next background process's flusher. The bound is for a loaded machine (the
      // new background process's PGlite and flusher start behind other work); a lost charge never arrives at all.
      await until(async () => (await charges(dataDir, w)).n >= received, 60_000);
      const after = await charges(dataDir, w);
      // A request cut off mid-answer may have been charged (its settle sent before the kill); none is lost.
      expect(after.n).toBeGreaterThanOrEqual(received);
      expect(after.n).toBeLessThanOrEqual(received + cut.length);
      expect(after.total).toBe(after.n * charge);
    } finally {
      expect(await again.stop()).toBe(0);
    }
  }, 180_000);
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
