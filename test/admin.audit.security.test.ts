/**
 * `admin audit`: Redis and Postgres agree after real traffic (some of it still in the outbox, one request still
 * holding credit); a row tampered with in either store is named and exits 1; `--fix` rebuilds and exits 0.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { AdminUsageError, parseAdmin } from "../src/admin/dispatch.ts";
import { auditLedger, auditOnce, runAudit, type AuditResult } from "../src/audit/audit.ts";
import { expectedCharge, startGateway, type TestGateway } from "./helpers/gateway.ts";
import { usageFor } from "./helpers/openaiStandin.ts";

let gw: TestGateway;
let dataDir: string;
beforeAll(async () => {
  gw = await startGateway();
  // The child process finds the test's Redis (and PGlite) in DATA_DIR, as an admin beside a running gateway does.
  dataDir = mkdtempSync(join(tmpdir(), "gw-audit-"));
  symlinkSync(dirname(gw.redisSocket), join(dataDir, "redis"));
  if (gw.connections.database.path) symlinkSync(dirname(gw.connections.database.path), join(dataDir, "postgres"));
}, 60_000);
afterAll(async () => {
  await gw?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

const messages = [{ role: "user" as const, content: "Say hello." }];
const usage = usageFor(messages.length);
const charge = expectedCharge(usage.prompt_tokens, usage.completion_tokens);

const deps = () => ({ redis: gw.services.redis, scripts: gw.services.scripts, sql: gw.services.sql, names: gw.services.ledger.names });
const audit = () => auditLedger(deps());

/** `bun src/main.ts admin …` as an operator runs it, against this test's Redis and Postgres. */
async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const env: Record<string, string> = { ...(process.env as Record<string, string>), DATA_DIR: dataDir, LOG_LEVEL: "error" };
  delete env.REDIS_URL;
  delete env.DATABASE_URL;
  if (!gw.connections.database.path) env.DATABASE_URL = gw.connections.database.url;
  const child = Bun.spawn(["bun", join(import.meta.dir, "..", "src", "main.ts"), "admin", ...args], {
    env,
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { code, stdout, stderr };
}

async function chat(key: string, stream = false) {
  const client = gw.openai(key);
  if (!stream) return void (await client.chat.completions.create({ model: "standin/echo", messages }));
  for await (const _ of await client.chat.completions.create({ model: "standin/echo", messages, stream: true }));
}

const only = (r: AuditResult) => r.differences.map(({ subject, field, redis, expected }) => ({ subject, field, redis, expected }));

describe("admin audit", () => {
  test("arguments: none or --fix; anything else is a usage mistake before anything opens", () => {
    expect(typeof parseAdmin(["audit"])).toBe("function");
    expect(typeof parseAdmin(["audit", "--fix"])).toBe("function");
    for (const args of [
      ["audit", "--fix", "now"],
      ["audit", "fix"],
      ["audit", "--all"],
    ])
      expect(() => parseAdmin(args)).toThrow(AdminUsageError);
  });

  let a: Awaited<ReturnType<TestGateway["newWallet"]>>;
  let b: Awaited<ReturnType<TestGateway["newWallet"]>>;

  test("after real traffic (flushed, still in the outbox, one request in flight) the books agree: exit 0", async () => {
    a = await gw.newWallet(5);
    b = await gw.newWallet(3, { budget_usdc: 2_000_000 });
    await gw.grant(a.wallet, 1_500_000);
    await chat(a.key);
    await chat(b.key, true);
    await gw.services.flusher.drain();
    // These stay in the outbox: the test gateway runs no background flusher.
    await chat(a.key, true);
    await chat(b.key);
    await chat(a.key);
    // A revoked key, and a request still holding credit (reserved, not settled yet).
    const spare = await gw.call("POST", "/v1/auth/keys", { ...(await gw.signIn(a.account)), label: "spare" });
    expect(spare.status).toBe(201);
    expect((await gw.call("DELETE", `/v1/auth/keys/${spare.body.id}`, await gw.signIn(a.account))).status).toBe(200);
    await gw.services.ledger.reserve(gw.services.ledger.principal(b.keyId, b.wallet), "audit-in-flight", 40_000);

    const r = await audit();
    expect(only(r)).toEqual([]);
    expect(r.clean).toBe(true);
    expect(await gw.ledgerState(a.wallet)).toEqual({ balance: 6_500_000 - 3 * charge, locked: 0 });
    const flight = Object.fromEntries(r.inFlight.map((f) => [f.label, [f.count, f.usdc]]));
    expect(flight["charges in the outbox"]).toEqual([3, 3 * charge]);
    expect(flight["charges in Postgres"]).toEqual([2, 2 * charge]);
    expect(flight["live holds"]).toEqual([1, 40_000]);
    expect(flight["credits applied"]).toEqual([3, 9_500_000]);
    const totals = Object.fromEntries(r.totals.map((t) => [t.label, [t.redis, t.expected]]));
    expect(totals["balance (USD)"]).toEqual([9_500_000 - 5 * charge, 9_500_000 - 5 * charge]);
    expect(totals["locked (USD) = Σ live holds"]).toEqual([40_000, 40_000]);
    expect(totals["key requests"]).toEqual([5, 5]);

    const run = await cli("audit");
    expect(run.stderr).not.toContain('"level":"error"');
    expect(run.code).toBe(0);
    expect(run.stdout).toStartWith("audit: the books agree");
    expect(run.stdout).toMatch(/^balance \(USD\) +\d+\.\d{6} +\d+\.\d{6} +0$/m);

    // The request finishes; nothing is left held for the repairs below (a rebuild resets locks).
    expect(await gw.services.ledger.release(gw.services.ledger.principal(b.keyId, b.wallet), "audit-in-flight")).toBe(true);
  }, 60_000);

  test("Redis tampered with (HINCRBY balance): named, exit 1; `--fix` rebuilds from Postgres: exit 0", async () => {
    const before = await gw.ledgerState(a.wallet);
    const walletName = gw.services.ledger.principal(a.keyId, a.wallet).walletName;
    await gw.services.redis.hincrby(walletName, "balance", 1_234_567);

    expect(only(await audit())).toEqual([
      { subject: `wallet ${a.wallet}`, field: "balance", redis: before.balance + 1_234_567, expected: before.balance },
    ]);
    const run = await cli("audit");
    expect(run.code).toBe(1);
    expect(run.stdout).toStartWith("audit: 1 difference between Redis and Postgres");
    expect(run.stdout).toContain(`wallet ${a.wallet}  balance`);
    expect(run.stdout).toContain("+1.234567");

    const fixed = await cli("audit", "--fix");
    expect(fixed.stderr).not.toContain('"level":"error"');
    expect(fixed.code).toBe(0);
    expect(fixed.stdout).toContain("--fix: rebuilt the Redis ledger from Postgres");
    expect(fixed.stdout.trimEnd().split("--fix:")[1]).toContain("audit: the books agree");
    expect(await gw.ledgerState(a.wallet)).toEqual(before);
    expect((await audit()).clean).toBe(true);
  }, 60_000);

  test("Postgres tampered with (a charge's amount): wallet and key named, exit 1; `--fix`: Redis follows Postgres", async () => {
    await gw.services.flusher.drain();
    const before = await gw.ledgerState(b.wallet);
    const [row] = await gw.services.sql<{ event_id: string }[]>`
      SELECT event_id FROM ledger_events WHERE wallet = ${b.wallet} AND type = 'charge' ORDER BY occurred_at LIMIT 1`;
    await gw.services.sql`UPDATE ledger_events SET amount_usdc = amount_usdc + 7 WHERE event_id = ${row!.event_id}`;

    const found = await audit();
    expect(found.clean).toBe(false);
    expect(only(found)).toEqual([
      { subject: `wallet ${b.wallet}`, field: "balance", redis: before.balance, expected: before.balance - 7 },
      { subject: `key ${b.keyId}`, field: "spent", redis: 2 * charge, expected: 2 * charge + 7 },
      { subject: `key ${b.keyId}`, field: "revenue", redis: expect.any(Number), expected: expect.any(Number) },
    ]);
    expect((found.differences[2]!.expected as number) - (found.differences[2]!.redis as number)).toBe(7);

    const r = await runAudit(gw.services, { fix: true });
    expect(r.clean).toBe(true);
    expect(await gw.ledgerState(b.wallet)).toEqual({ balance: before.balance - 7, locked: 0 });
  }, 60_000);

  test("Postgres tampered with (a credit deleted): the credit and the balance named; `--fix` drops them from Redis", async () => {
    const c = await gw.newWallet(0);
    await gw.grant(c.wallet, 2_000_000);
    await gw.grant(c.wallet, 500_000);
    await chat(c.key);
    const [credit] = await gw.services.sql<{ event_id: string }[]>`
      DELETE FROM credits WHERE wallet = ${c.wallet} AND amount_usdc = 500000 RETURNING event_id`;

    const found = await audit();
    expect(only(found)).toEqual([
      { subject: `credit ${credit!.event_id}`, field: "amount", redis: 500_000, expected: null },
      { subject: `wallet ${c.wallet}`, field: "balance", redis: 2_500_000 - charge, expected: 2_000_000 - charge },
    ]);
    const run = await cli("audit");
    expect(run.code).toBe(1);
    expect(run.stdout).toContain(`credit ${credit!.event_id}`);

    expect((await runAudit(gw.services, { fix: true })).clean).toBe(true);
    expect(await gw.ledgerState(c.wallet)).toEqual({ balance: 2_000_000 - charge, locked: 0 });
    expect(
      await gw.services.redis.hexists(gw.services.ledger.names.credited(gw.services.ledger.names.shardOf(c.wallet)), credit!.event_id),
    ).toBe(0);
  }, 60_000);

  test("a revoked key brought back in Redis is named; `--fix` revokes it again", async () => {
    const d = await gw.newWallet(1);
    expect((await gw.call("DELETE", `/v1/auth/keys/${d.keyId}`, await gw.signIn(d.account))).status).toBe(200);
    const keyHash = gw.services.ledger.principal(d.keyId, d.wallet).apiKeyName;
    await gw.services.redis.hset(keyHash, "revoked", "0");

    expect(only(await audit())).toEqual([{ subject: `key ${d.keyId}`, field: "revoked", redis: "0", expected: "1" }]);
    expect((await runAudit(gw.services, { fix: true })).clean).toBe(true);
    expect(await gw.services.redis.hget(keyHash, "revoked")).toBe("1");
  }, 60_000);

  test("an outbox and an applied-credit set larger than a page are read a page per command, and still exactly", async () => {
    const redis = (...args: string[]) => gw.services.scripts.client.send(args[0]!, args.slice(1));
    await gw.services.flusher.drain();
    const e = await gw.newWallet(1);
    // HSCAN returns a hash in Redis's compact encoding whole; a hash past this many fields is scanned in pages.
    const compactMax = Object.values((await redis("CONFIG", "GET", "hash-max-listpack-entries")) as Record<string, string>)[0]!;
    await redis("CONFIG", "SET", "hash-max-listpack-entries", "16");
    try {
      for (let i = 0; i < 40; i++) await gw.grant(e.wallet, 1_000);
    } finally {
      await redis("CONFIG", "SET", "hash-max-listpack-entries", compactMax);
    }
    for (let i = 0; i < 7; i++) await chat(e.key); // stays in the outbox: the test gateway runs no background flusher
    const names = gw.services.ledger.names;
    const outbox = names.outbox(names.shardOf(e.wallet));
    const credited = names.credited(names.shardOf(e.wallet));
    expect(await gw.services.redis.hlen(credited)).toBeGreaterThanOrEqual(41);
    expect(await redis("OBJECT", "ENCODING", credited)).toBe("hashtable");

    // Redis logs every command it runs, with its arguments (commands inside a script are not logged on their own).
    await redis("CONFIG", "SET", "slowlog-log-slower-than", "0");
    await redis("CONFIG", "SET", "slowlog-max-len", "100000");
    await redis("SLOWLOG", "RESET");
    let r: Awaited<ReturnType<typeof auditOnce>>;
    let commands: string[][];
    try {
      r = await auditOnce({ ...deps(), pageSize: 3 });
      commands = ((await redis("SLOWLOG", "GET", "-1")) as [number, number, number, string[]][]).map((entry) => entry[3]);
    } finally {
      await redis("CONFIG", "SET", "slowlog-log-slower-than", "10000");
    }
    expect(only({ ...r, clean: false })).toEqual([]);
    const flight = Object.fromEntries(r.inFlight.map((f) => [f.label, [f.count, f.usdc]]));
    expect(flight["charges in the outbox"]).toEqual([7, 7 * charge]);
    const [applied] = await gw.services.sql<{ count: number; usdc: number }[]>`
      SELECT COUNT(*)::int AS count, SUM(amount_usdc)::bigint AS usdc FROM credits WHERE applied_at IS NOT NULL`;
    expect(flight["credits applied"]).toEqual([applied!.count, Number(applied!.usdc)]);

    // The shard's outbox (7 charges) and credited hash (41 credits or more) were read in pages of 3, outside the script.
    const xranges = commands.filter((c) => c[0]?.toUpperCase() === "XRANGE" && c[1] === outbox);
    const hscans = commands.filter((c) => c[0]?.toUpperCase() === "HSCAN" && c[1] === credited);
    expect(xranges.map((c) => c.slice(4))).toEqual([
      ["COUNT", "3"],
      ["COUNT", "3"],
      ["COUNT", "3"],
    ]);
    expect(hscans.length).toBeGreaterThan(5);
    for (const c of hscans) expect(c.slice(3)).toEqual(["COUNT", "3"]);
  }, 60_000);

  test("under load (chat JSON and streams in flight, grants, the flusher running) every single pass is exact", async () => {
    const wallets = await Promise.all([1, 2, 3, 4].map(() => gw.newWallet(2)));
    let stop = false;
    let served = 0;
    const traffic = wallets.map(async (w, i) => {
      for (let n = 0; !stop; n++) {
        if ((n + i) % 2 === 0) await chat(w.key);
        else for await (const _ of await gw.openai(w.key).chat.completions.create({ model: "standin/drip", messages, stream: true }));
        served++;
      }
    });
    let granted = 0;
    const grants = (async () => {
      for (let n = 0; !stop; n++) (await gw.grant(wallets[n % wallets.length]!.wallet, 1_000), granted++);
    })();
    // Often enough to flush between and during the passes, seldom enough that charges wait in the outbox.
    gw.services.flusher.start(20);
    const seen = { holds: 0, outbox: 0, flushedBetween: 0 };
    try {
      // At least 8 passes, and on until 24 requests were served meanwhile.
      for (let pass = 0; (pass < 8 || served < 24) && pass < 500; pass++) {
        const r = await auditOnce(deps());
        expect(only({ ...r, clean: false })).toEqual([]);
        const flight = Object.fromEntries(r.inFlight.map((f) => [f.label, f]));
        seen.holds += flight["live holds"]!.count;
        seen.outbox += flight["charges in the outbox"]!.count;
        if (flight["charges in the outbox"]!.note) seen.flushedBetween++;
      }
    } finally {
      stop = true;
      await Promise.all([...traffic, grants]);
      await gw.services.flusher.stop();
    }
    // The audits really ran against requests in flight and an outbox being flushed.
    expect(served).toBeGreaterThanOrEqual(24);
    expect(seen.holds).toBeGreaterThan(0);
    expect(seen.outbox).toBeGreaterThan(0);
    expect(granted).toBeGreaterThan(8);
    expect((await audit()).clean).toBe(true);
  }, 60_000);
});
