/**
 * The admin command as an operator runs it: a child process beside a running gateway's embedded services in
 * DATA_DIR, the answer alone on stdout, logs on stderr, exit code 0.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { loadConfig } from "../src/config.ts";
import { startEmbeddedPostgres, type EmbeddedPostgres } from "../src/embedded/postgres.ts";
import { startEmbeddedRedis, type EmbeddedRedis } from "../src/embedded/redis.ts";
import { setLogLevel } from "../src/log.ts";
import { buildServices, type Services } from "../src/wiring.ts";
import { runCli } from "./helpers/adminCli.ts";

let root: string;
let dataDir: string;
let redis: EmbeddedRedis;
let pg: EmbeddedPostgres;
let gateway: Services;

// This test process plays the running gateway: its embedded services serve DATA_DIR, the admin child joins them.
beforeAll(async () => {
  setLogLevel("error");
  root = mkdtempSync(join(tmpdir(), "gw-admin-"));
  dataDir = join(root, "data");
  redis = await startEmbeddedRedis(join(dataDir, "redis"), { persist: false });
  pg = await startEmbeddedPostgres(join(dataDir, "postgres"));
  gateway = await buildServices(loadConfig({ DATA_DIR: dataDir, LOG_LEVEL: "error" }), {
    redis: redis.socket,
    database: { url: pg.url, path: pg.path, max: pg.maxConnections },
  });
}, 90_000);
afterAll(async () => {
  await gateway?.close();
  await pg?.stop();
  await redis?.stop();
  rmSync(root, { recursive: true, force: true });
});

const admin = (...args: string[]) => runCli(["admin", ...args], { cwd: root, env: { DATA_DIR: dataDir } });
const freshWallet = () => privateKeyToAccount(generatePrivateKey()).address.toLowerCase();

describe("--help", () => {
  test("every command answers --help on stdout with exit 0, opening nothing", async () => {
    const commands = [
      [],
      ["grant"],
      ["balance"],
      ["keys", "list"],
      ["keys", "revoke"],
      ["redeem-codes", "create"],
      ["ref-codes", "create"],
      ["referrals"],
    ];
    const results = await Promise.all(commands.map((c) => runCli(["admin", ...c, "--help"], { cwd: root })));
    results.forEach((r, i) => {
      expect(r.code).toBe(0);
      expect(r.stderr).toBe("");
      expect(r.stdout).toStartWith(
        commands[i]!.length ? `usage: admin ${commands[i]!.join(" ")}` : "usage: bun src/main.ts admin <command>",
      );
    });
    const overview = results[0]!.stdout;
    for (const name of ["grant", "balance", "keys list", "keys revoke", "redeem-codes create", "ref-codes create", "referrals"]) {
      expect(overview).toContain(`admin ${name}`);
    }
    for (const args of [["--help"], ["serve", "--help"], ["help"]]) {
      const r = await runCli(args, { cwd: root });
      expect(r).toMatchObject({ code: 0, stderr: "" });
      expect(r.stdout).toStartWith("usage: bun src/main.ts");
    }
  }, 60_000);
});

describe("against the running gateway's services", () => {
  test("grant: one line on stdout, the credit visible to the gateway", async () => {
    const wallet = freshWallet();
    const r = await admin("grant", wallet, "2.5", "--reason", "support ticket 7");
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^granted 2\.500000 USD to 0x[0-9a-f]{40} \(credit #\d+\); balance 2\.500000 USD\n$/);
    expect(await gateway.ledger.reads.balance(wallet)).toEqual({ balance: 2_500_000, locked: 0 });
    // stderr says which ledger it opened, first; then nothing but warnings or errors, and never on stdout.
    const [first, ...rest] = r.stderr.split("\n").filter(Boolean);
    expect(first).toBe(`ledger: DATA_DIR=${dataDir}, served by the running gateway (pid ${process.pid})`);
    for (const line of rest) expect(JSON.parse(line).level).toMatch(/^(warn|error)$/);
  }, 30_000);

  test("balance: header and one tab-separated row", async () => {
    const wallet = freshWallet();
    await gateway.credits.add({ eventId: `grant:${crypto.randomUUID()}`, wallet, kind: "grant", amountUsdc: 1_250_000, reason: "t" });
    const r = await admin("balance", wallet.toUpperCase().replace("0X", "0x"));
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(`wallet\tbalance_usd\tlocked_usd\tavailable_usd\n${wallet}\t1.250000\t0.000000\t1.250000\n`);
    const unknown = await admin("balance", freshWallet());
    expect(unknown.stdout.split("\n")[1]).toMatch(/\t0\.000000\t0\.000000\t0\.000000$/);
  }, 30_000);

  test("keys list and keys revoke: revoked in Postgres and in Redis, as the API does", async () => {
    const wallet = freshWallet();
    const a = await gateway.keys.create(wallet, { label: "laptop" });
    const b = await gateway.keys.create(wallet, { label: "ci" });
    const listed = await admin("keys", "list", wallet);
    expect(listed.code).toBe(0);
    expect(listed.stdout).toBe(`id\tlabel\tcreated_at\trevoked_at\n${a.id}\tlaptop\t${a.created_at}\t-\n${b.id}\tci\t${b.created_at}\t-\n`);

    const revoked = await admin("keys", "revoke", String(a.id));
    expect(revoked).toMatchObject({ code: 0, stdout: `revoked key #${a.id} of ${wallet}\n` });
    const [row] = await gateway.sql<{ revoked_at: Date | null }[]>`SELECT revoked_at FROM api_keys WHERE id = ${a.id}`;
    expect(row!.revoked_at).toBeInstanceOf(Date);
    expect(await gateway.redis.hget(gateway.ledger.principal(a.id, wallet).apiKeyName, "revoked")).toBe("1");
    await expect(gateway.apiKeyAuth.assertActive(await gateway.apiKeyAuth.resolve(a.key))).rejects.toThrow();

    const again = await admin("keys", "revoke", String(a.id));
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(new RegExp(`^key #${a.id} of ${wallet} was already revoked at .*; revocation re-asserted\\n$`));
    const after = await admin("keys", "list", wallet);
    expect(after.stdout.split("\n")[1]).toMatch(new RegExp(`^${a.id}\\tlaptop\\t.*\\t\\d{4}-\\d\\d-\\d\\dT`));
    expect(after.stdout.split("\n")[2]).toEndWith("\t-");
  }, 60_000);

  test("keys revoke of an unknown id: one line on stderr, exit 1, nothing on stdout", async () => {
    const r = await admin("keys", "revoke", "987654321");
    expect(r).toMatchObject({ code: 1, stdout: "" });
    expect(r.stderr.trim().split("\n").at(-1)).toBe("no API key #987654321");
  }, 30_000);
});
