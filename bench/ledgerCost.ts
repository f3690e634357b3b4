/**
 * Redis instructions per request of the chat path's ledger calls, under callgrind (deterministic, unlike CPU time
 * on a shared box): starts redis-server under `valgrind --tool=callgrind`, drives the ledger's own batch calls
 * (LedgerBatches: reserve-batch then settle-batch, N items per call) for one wallet and for requests spread over W
 * wallets, and prints instructions per request (reserve and settle apart). No gateway, no Postgres.
 *   bun bench/ledgerCost.ts [N=16] [rounds=40] [wallets=16]
 * Needs valgrind and redis-server on PATH.
 */
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { keyStateFields } from "../src/ledger/apiKeyState.ts";
import { LedgerBatches } from "../src/ledger/batcher.ts";
import { LedgerFence } from "../src/ledger/fence.ts";
import { RedisNames } from "../src/ledger/names.ts";
import { LedgerScripts } from "../src/ledger/scripts.ts";

const N = Number(process.argv[2] ?? 16);
const ROUNDS = Number(process.argv[3] ?? 40);
const WALLETS = Number(process.argv[4] ?? 16);
const dir = mkdtempSync(join(tmpdir(), "ledger-cost-"));
const socket = join(dir, "redis.sock");
const proc = Bun.spawn(
  [
    "valgrind",
    "--tool=callgrind",
    `--callgrind-out-file=${dir}/cg.%p`,
    "--collect-atstart=yes",
    "redis-server",
    "--port",
    "0",
    "--unixsocket",
    socket,
    "--save",
    "",
    "--appendonly",
    "no",
    "--dir",
    dir,
  ],
  { stdout: "ignore", stderr: "ignore" },
);
for (let i = 0; i < 600 && !(await Bun.file(socket).exists()); i++) await Bun.sleep(100);

const names = new RedisNames(48);
const scripts = await LedgerScripts.connect(socket);
const client = scripts.client;
const cmd = (c: string, a: string[]) => client.send(c, a, a[0]);
for (const s of names.allShards()) await cmd("SET", [names.fence(s), "1"]);
const fence = new LedgerFence(client, names);
await fence.readAll();
const limits = { rateLimitRequests: 1_000_000_000, rateLimitWindowMs: 60_000, holdTtlMs: 3_600_000, resolutionTtlS: 604_800 };
const batches = new LedgerBatches(scripts, fence, names, limits);

interface Principal {
  shard: string;
  walletName: string;
  apiKeyName: string;
  wallet: string;
  keyId: number;
}
async function principals(count: number, base: number): Promise<Principal[]> {
  const out: Principal[] = [];
  for (let i = 0; i < count; i++) {
    const wallet = `0x${(base + i).toString(16).padStart(40, "0")}`;
    const shard = names.shardOf(wallet);
    const p = { shard, walletName: names.wallet(shard, wallet), apiKeyName: names.apiKey(shard, base + i), wallet, keyId: base + i };
    await cmd("HSET", [p.walletName, "balance", "1000000000000", "locked", "0"]);
    const k = keyStateFields({ revoked: false, budget: null });
    await cmd("HSET", [p.apiKeyName, "revoked", k.revoked, "budget", k.budget]);
    out.push(p);
  }
  return out;
}

// Sends the items submitted in `put` as one call: the queue looks busy while they are submitted.
async function oneCall<R>(b: { submit(q: string, it: never): Promise<R>; flush(q: string): void }, items: unknown[]): Promise<R[]> {
  const inFlight = (b as unknown as { inFlight: Map<string, number> }).inFlight;
  const queue = batches.queue((items[0] as Principal).shard);
  inFlight.set(queue, 1);
  const replies = items.map((it) => b.submit(queue, it as never));
  inFlight.set(queue, 0);
  b.flush(queue);
  return Promise.all(replies);
}

let seq = 0;
const reserveItems = (ps: Principal[]) =>
  Array.from({ length: N }, (_, i) => ({ ...ps[i % ps.length]!, holdId: `h${++seq}`, amount: 5_000, rpm: 0 }));
async function reserve(items: ReturnType<typeof reserveItems>): Promise<void> {
  const held = await oneCall(batches.reserves, items);
  if (held.some((r) => r[0] !== 1)) throw new Error(`reserve refused: ${JSON.stringify(held)}`);
}
async function settle(items: ReturnType<typeof reserveItems>): Promise<void> {
  const settled = await oneCall(
    batches.settles,
    items.map((it) => ({ ...it, charge: 1_234, promptTokens: 812, completionTokens: 95, costMicro: 1_100, model: "openai/gpt-4o-mini" })),
  );
  if (settled.some((r) => r[0] !== 1)) throw new Error(`settle refused: ${JSON.stringify(settled)}`);
}

async function instructions(): Promise<number> {
  // callgrind_control -d dumps the counters since the last zero; the newest dump file's summary line.
  const before = new Set(readdirSync(dir));
  Bun.spawnSync(["callgrind_control", "-d", String(proc.pid)]);
  for (let i = 0; i < 100; i++) {
    const f = readdirSync(dir).filter((n) => n.startsWith("cg.") && !before.has(n));
    if (f.length) {
      await Bun.sleep(200);
      const m = /^summary: (\d+)/m.exec(readFileSync(join(dir, f[0]!), "utf8"));
      if (m) return Number(m[1]);
    }
    await Bun.sleep(100);
  }
  throw new Error("no callgrind dump");
}

const zero = () => Bun.spawnSync(["callgrind_control", "-z", String(proc.pid)]);
const out: string[] = [];
for (const [label, ps] of [
  ["one wallet", await principals(1, 1)],
  [`${WALLETS} wallets`, await principals(WALLETS, 1000)],
] as const) {
  for (let r = 0; r < 3; r++) {
    const items = reserveItems(ps);
    await reserve(items);
    await settle(items);
  }
  // Blocks of two rounds, each reserve then settle measured apart: the holds index stays as small as under load
  // (a zset of a few dozen live holds), not ROUNDS × N.
  let reserves = 0;
  let settles = 0;
  for (let r = 0; r < ROUNDS; r += 2) {
    const block = [reserveItems(ps), reserveItems(ps)];
    zero();
    for (const items of block) await reserve(items);
    reserves += await instructions();
    zero();
    for (const items of block) await settle(items);
    settles += await instructions();
  }
  const per = (n: number) => Math.round(n / (ROUNDS * N) / 100) / 10;
  out.push(
    `${label}: ${per(reserves + settles)}k instructions per request = reserve ${per(reserves)}k + settle ${per(settles)}k (N = ${N}, ${ROUNDS} rounds)`,
  );
}
console.log(out.join("\n"));
scripts.close();
proc.kill();
await proc.exited;
if (process.env.KEEP) console.log(dir);
else rmSync(dir, { recursive: true, force: true });
