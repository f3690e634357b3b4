/**
 * Redis instructions per request of the chat path's ledger calls, under callgrind (deterministic, unlike CPU time
 * on a shared box): starts redis-server under `valgrind --tool=callgrind`, drives the ledger's own batch calls
 * (LedgerBatches: reserve-batch then settle-batch, N items per call) for one wallet and for requests spread over W
 * wallets, and prints instructions per request (reserve and settle apart). No gateway, no Postgres.
 *   bun bench/ledgerCost.ts [N=16] [rounds=40] [wallets=16]
 *   LEASED=1 bun bench/ledgerCost.ts …   # requests admitted under credit leases: settle-leased-batch only
 * Needs valgrind and redis-server on PATH. Counts only command processing (readQueryFromClient and below).
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
    // Only what serving commands costs: serverCron runs by wall-clock time, far more often per command under
    // callgrind's slowdown than on a real machine.
    "--toggle-collect=readQueryFromClient",
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

// Sends the items as one call per queue: each queue looks busy while its items are submitted.
async function oneCall<R>(
  b: { submit(q: string, it: never): Promise<R>; flush(q: string): void },
  items: unknown[],
  queueOf = (it: unknown) => batches.queue((it as Principal).shard),
): Promise<R[]> {
  const inFlight = (b as unknown as { inFlight: Map<string, number> }).inFlight;
  const queues = new Set(items.map(queueOf));
  for (const q of queues) inFlight.set(q, 1);
  const replies = items.map((it) => b.submit(queueOf(it), it as never));
  for (const q of queues) {
    inFlight.set(q, 0);
    b.flush(q);
  }
  return Promise.all(replies);
}

let seq = 0;
const reserveItems = (ps: Principal[]) =>
  Array.from({ length: N }, (_, i) => ({ ...ps[i % ps.length]!, holdId: `h${++seq}`, amount: 5_000, rpm: 0 }));
async function reserve(items: ReturnType<typeof reserveItems>): Promise<void> {
  const held = await oneCall(batches.reserves, items);
  if (held.some((r) => r[0] !== 1)) throw new Error(`reserve refused: ${JSON.stringify(held)}`);
}
const usage = { promptTokens: 812, completionTokens: 95, costMicro: 1_100, model: "openai/gpt-4o-mini" };
async function settle(items: ReturnType<typeof reserveItems>): Promise<void> {
  const settled = await oneCall(
    batches.settles,
    items.map((it) => ({ ...it, charge: 1_234, ...usage })),
  );
  if (settled.some((r) => r[0] !== 1)) throw new Error(`settle refused: ${JSON.stringify(settled)}`);
}
// LEASED=1: the requests were admitted under a credit lease of their key (lease-8, one per wallet): no reserve
// call, the settles go to settle-leased-batch, one call per shard as the gateway sends them.
const LEASED = process.env.LEASED === "1";
const leaseOf = new Map<string, string>();
const spanLeased = batches.flush.toString().includes("leasedSettles.flush(this.queue(");
async function openLeases(ps: Principal[]): Promise<void> {
  for (const p of ps) {
    const id = `lease-${p.keyId}`;
    leaseOf.set(p.walletName, id);
    const keys = [
      p.walletName,
      p.apiKeyName,
      names.holds(p.shard),
      names.holdMarker(p.shard, id),
      names.rate(p.shard, p.wallet, 1),
      names.rate(p.shard, p.wallet, 0),
      names.outbox(p.shard),
      names.fence(p.shard),
    ];
    const r = await scripts.lease(keys, [
      "1",
      id,
      `${p.wallet}|${p.keyId}`,
      100_000_000_000,
      0,
      1000,
      0,
      0,
      0,
      1_000_000_000,
      60_000,
      1,
      3_600_000,
      604_800,
    ]);
    if (r[0] !== 1) throw new Error(`lease refused: ${JSON.stringify(r)}`);
  }
}
async function settleLeased(items: ReturnType<typeof reserveItems>): Promise<void> {
  const settled = await oneCall(
    batches.leasedSettles,
    items.map((it) => ({ ...it, charge: 1_234, ...usage, lease: leaseOf.get(it.walletName)!, held: 5_000 })),
    // The queue the gateway puts them in: every shard's on a single Redis where its leased settles span shards.
    (it) => (spanLeased ? batches.queue((it as Principal).shard) : (it as Principal).shard),
  );
  if (settled.some((r) => r[0] !== 1)) throw new Error(`leased settle refused: ${JSON.stringify(settled)}`);
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
  if (LEASED) await openLeases(ps);
  for (let r = 0; r < 3; r++) {
    const items = reserveItems(ps);
    if (LEASED) await settleLeased(items);
    else (await reserve(items), await settle(items));
  }
  // Blocks of two rounds, each reserve then settle measured apart: the holds index stays as small as under load
  // (a zset of a few dozen live holds), not ROUNDS × N.
  let reserves = 0;
  let settles = 0;
  for (let r = 0; r < ROUNDS; r += 2) {
    const block = [reserveItems(ps), reserveItems(ps)];
    if (LEASED) {
      zero();
      for (const items of block) await settleLeased(items);
      settles += await instructions();
      continue;
    }
    zero();
    for (const items of block) await reserve(items);
    reserves += await instructions();
    zero();
    for (const items of block) await settle(items);
    settles += await instructions();
  }
  const per = (n: number) => Math.round(n / (ROUNDS * N) / 100) / 10;
  out.push(
    `${label}${LEASED ? " (leased)" : ""}: ${per(reserves + settles)}k instructions per request = reserve ${per(reserves)}k + settle ${per(settles)}k (N = ${N}, ${ROUNDS} rounds)`,
  );
}
console.log(out.join("\n"));
scripts.close();
proc.kill();
await proc.exited;
if (process.env.KEEP) console.log(dir);
else rmSync(dir, { recursive: true, force: true });
