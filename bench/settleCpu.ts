/**
 * The serving process's CPU per settle (Holds.settleBehind → batcher → Bun's Redis client), against a real
 * redis-server on a unix socket: batches of N settles started in one tick (as N requests' answers would), each
 * batch awaited to its end (on the wire, charged, bookkeeping done). Reserves run first and are not counted.
 * Prints CPU µs per settle for ROUNDS batches, after a warm-up. No gateway, no Postgres.
 *   bun bench/settleCpu.ts [N=16] [batches=3000]
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { Holds, type HeldCall } from "../src/billing/holds.ts";
import { keyStateFields } from "../src/ledger/apiKeyState.ts";
import { Ledger } from "../src/ledger/ledger.ts";
import { RedisNames } from "../src/ledger/names.ts";
import { LedgerScripts } from "../src/ledger/scripts.ts";
import type { Model } from "../src/providers/catalog.ts";
import type { PendingSettles } from "../src/store/pendingSettles.ts";

// MODE=ledger: ledger.settleOutcome alone (no Holds: no retry, deadline, bookkeeping).
const MODE = process.env.MODE ?? "holds";
const N = Number(process.argv[2] ?? 16);
const BATCHES = Number(process.argv[3] ?? 3000);
const dir = mkdtempSync(join(tmpdir(), "settle-cpu-"));
const socket = join(dir, "redis.sock");
const proc = Bun.spawn(["redis-server", "--port", "0", "--unixsocket", socket, "--save", "", "--appendonly", "no", "--dir", dir], {
  stdout: "ignore",
  stderr: "ignore",
});
for (let i = 0; i < 100 && !(await Bun.file(socket).exists()); i++) await Bun.sleep(50);

const names = new RedisNames(48);
const redis = new Redis(socket);
const scripts = await LedgerScripts.connect(socket);
for (const s of names.allShards()) await redis.set(names.fence(s), "1");
const ledger = new Ledger(redis, scripts, names, { rateLimitRequests: 1e9, rateLimitWindowMs: 60_000, holdTtlMs: 3_600_000 });
await ledger.fence.readAll();
const pending = { record: async () => {} } as unknown as PendingSettles;
const holds = new Holds(ledger, pending);
const wallet = `0x${"1".padStart(40, "0")}`;
const p = ledger.principal(1, wallet);
await redis.hset(p.walletName, "balance", "1000000000000000", "locked", "0");
const k = keyStateFields({ revoked: false, budget: null });
await redis.hset(p.apiKeyName, "revoked", k.revoked, "budget", k.budget);
const model = {
  id: "m/x",
  provider: "m",
  upstreamModel: "x",
  name: "x",
  contextLength: 128_000,
  maxOutputTokens: 4096,
  promptPricePer1MTokens: 2.5,
  completionPricePer1M: 10,
  costPromptPer1M: 2,
  costCompletionPer1M: 8,
  promptPico: 2_500_000,
  completionPico: 10_000_000,
  costPromptPico: 2_000_000,
  costCompletionPico: 8_000_000,
  kind: "chat",
} as unknown as Model;
const bound = { promptTokens: 1000, completionTokens: 1000, micro: 50_000, unbounded: false } as HeldCall["bound"];
const usage = { prompt_tokens: 812, completion_tokens: 95, total_tokens: 907 };

let seq = 0;
async function round(): Promise<number> {
  const ids = Array.from({ length: N }, () => `h${++seq}`);
  const held = await Promise.all(ids.map((id) => ledger.reserve(p, id, 50_000)));
  if (held.some((r) => !r.ok)) throw new Error("reserve refused");
  const t0 = process.cpuUsage();
  if (MODE === "ledger") {
    const d = { promptTokens: 812, completionTokens: 95, costMicro: 2385, model: "m/x" };
    await Promise.all(ids.map((holdId) => ledger.settleOutcome(p, holdId, 3000, d, () => {})));
  } else {
    const wires = ids.map((holdId) => holds.settleBehind({ principal: p, holdId, model, bound, trace: {} as HeldCall["trace"] }, usage));
    await Promise.all(wires);
    await holds.idle();
  }
  const t = process.cpuUsage(t0);
  return t.user + t.system;
}
for (let i = 0; i < 300; i++) await round();
const res: number[] = [];
for (let b = 0; b < 5; b++) {
  let cpu = 0;
  for (let i = 0; i < BATCHES / 5; i++) cpu += await round();
  res.push(cpu / ((BATCHES / 5) * N));
}
const charged = Number(await redis.hget(p.walletName, "balance"));
console.log(`settle CPU µs/item (N=${N}), 5 blocks: ${res.map((x) => x.toFixed(1)).join(" ")}  balance ${charged}`);
redis.disconnect();
scripts.client.close?.();
proc.kill();
process.exit(0);
