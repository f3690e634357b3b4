import type { RedisNames } from "../ledger/names.ts";
import type { LedgerScripts } from "../ledger/scripts.ts";
import { inChunks, type RedisCommands, scanKeys } from "../redis/connect.ts";
import type { CreditInput } from "./credits.ts";
import type { Sql } from "./db.ts";

/** An API key hash as Redis holds it; counters missing in Redis read as 0. */
export interface RedisKeyState {
  revoked: string | null;
  budget: string | null;
  spent: number;
  locked: number;
  requests: number;
  promptTokens: number;
  completionTokens: number;
  revenue: number;
}

/** A charge as the outbox carries it (settle-5's event). */
export interface ChargeEvent {
  eventId: string;
  wallet: string;
  keyId: number;
  amount: number;
  cost: number;
  pt: number;
  ct: number;
  at: number;
}

/** One shard's Redis books, all read by one audit-3.lua call: one instant. */
export interface ShardBooks {
  shard: string;
  /** Redis clock of the read, ms: a charge stamped at or after it was settled after the read. */
  nowMs: number;
  /** Wallet → {balance, locked}; null when the hash does not exist. */
  wallets: Map<string, { balance: number; locked: number } | null>;
  keys: Map<number, RedisKeyState | null>;
  liveHolds: { holdId: string; amount: number; wallet: string; keyId: number }[];
  /** Applied credits: credit event id → amount. */
  credited: Map<string, number>;
  outboxEntries: number;
  outboxCharges: ChargeEvent[];
}

/** Which wallets and keys to read, per shard; and Redis records that sit in a shard their owner does not map to. */
export interface LedgerNames {
  byShard: Map<string, { wallets: Set<string>; keyIds: Set<number> }>;
  misplaced: { redisKey: string; belongsIn: string }[];
}

// A shard whose holds keep opening faster than two reads apart is read again, at most this often.
const MAX_READS = 20;

/**
 * Every wallet and key the audit compares: what Redis has (SCAN) and what Postgres knows, read in that order.
 * Money reaches Postgres before Redis (credits, keys), so a wallet or key that Redis gains during the SCAN is
 * already in the Postgres list. One created after both is left to the next audit.
 */
export async function listLedgerNames(redis: RedisCommands, sql: Sql, redisNames: RedisNames): Promise<LedgerNames> {
  const found: { shard: string; kind: string; id: string; name: string }[] = [];
  for await (const names of scanKeys(redis, redisNames.recordPattern, 2000)) {
    for (const name of names) {
      const record = redisNames.parseRecord(name);
      if (record) found.push({ ...record, name });
    }
  }
  const wallets = await sql<{ wallet: string }[]>`
    SELECT wallet FROM credits UNION SELECT wallet FROM api_keys UNION SELECT wallet FROM ledger_events WHERE type = 'charge'`;
  const apiKeys = await sql<{ id: number; wallet: string }[]>`SELECT id, wallet FROM api_keys`;

  const byShard = new Map(redisNames.allShards().map((s) => [s, { wallets: new Set<string>(), keyIds: new Set<number>() }]));
  const misplaced: LedgerNames["misplaced"] = [];
  const keyWallet = new Map(apiKeys.map((k) => [k.id, k.wallet]));
  for (const w of wallets) byShard.get(redisNames.shardOf(w.wallet))!.wallets.add(w.wallet);
  for (const k of apiKeys) byShard.get(redisNames.shardOf(k.wallet))!.keyIds.add(k.id);
  for (const f of found) {
    const owner = f.kind === "w" ? f.id : keyWallet.get(Number(f.id));
    const home = owner === undefined ? f.shard : redisNames.shardOf(owner);
    if (home !== f.shard || !byShard.has(f.shard)) {
      misplaced.push({ redisKey: f.name, belongsIn: byShard.has(home) ? home : "no shard" });
      continue;
    }
    if (f.kind === "w") byShard.get(home)!.wallets.add(f.id);
    else if (/^\d+$/.test(f.id)) byShard.get(home)!.keyIds.add(Number(f.id));
  }
  return { byShard, misplaced };
}

const num = (v: unknown) => (v === null || v === undefined ? 0 : Number(v));
const str = (v: unknown) => (v === null || v === undefined ? null : String(v));

/**
 * Reads one shard in one atomic script call (one slot, so it runs on a Redis Cluster too). The hold markers must
 * be named in KEYS, so the holds are listed first; a hold opened between that list and the script is seen in the
 * script's own list of holds, and the shard is read again with it.
 */
export async function readShard(scripts: LedgerScripts, redisNames: RedisNames, shard: string, wallets: string[], keyIds: number[]): Promise<ShardBooks> {
  let holdIds = (await scripts.client.send("ZRANGE", [redisNames.holds(shard), "0", "-1"], redisNames.holds(shard))) as string[];
  for (let read = 0; read < MAX_READS; read++) {
    const names = [
      redisNames.holds(shard), redisNames.outbox(shard), redisNames.credited(shard),
      ...wallets.map((w) => redisNames.wallet(shard, w)), ...keyIds.map((k) => redisNames.apiKey(shard, k)), ...holdIds.map((h) => redisNames.holdMarker(shard, h)),
    ];
    const [now, w, k, m, holds, credited, outbox] = (await scripts.audit(names, [wallets.length, keyIds.length])) as [
      string, (unknown[] | null)[], unknown[][], (string | null)[], string[], string[], [string, string[] | null][],
    ];
    const marker = new Map(holdIds.map((h, i) => [h, m[i] ?? null]));
    if (holds.some((h) => !marker.has(h))) {
      holdIds = holds;
      continue;
    }
    const books: ShardBooks = {
      shard, nowMs: Number(now), wallets: new Map(), keys: new Map(), liveHolds: [], credited: new Map(), outboxEntries: outbox.length, outboxCharges: [],
    };
    wallets.forEach((wallet, i) => {
      const [balance, locked] = w[i] ?? [];
      books.wallets.set(wallet, balance == null && locked == null ? null : { balance: num(balance), locked: num(locked) });
    });
    keyIds.forEach((id, i) => {
      const f = k[i] ?? [];
      books.keys.set(id, f.every((v) => v == null) ? null : {
        revoked: str(f[0]), budget: str(f[1]), spent: num(f[2]), locked: num(f[3]), requests: num(f[4]),
        promptTokens: num(f[5]), completionTokens: num(f[6]), revenue: num(f[7]),
      });
    });
    for (const holdId of holds) {
      const live = /^live\|(-?\d+)\|([^|]*)\|(.*)$/.exec(marker.get(holdId) ?? "");
      if (live) books.liveHolds.push({ holdId, amount: Number(live[1]), wallet: live[2]!, keyId: Number(live[3]) });
    }
    for (let i = 0; i + 1 < credited.length; i += 2) books.credited.set(credited[i]!, Number(credited[i + 1]));
    for (const [, fields] of outbox) {
      const at = fields ? fields.indexOf("e") : -1;
      const json = at >= 0 ? fields![at + 1] : undefined;
      const e = json ? (JSON.parse(json) as { type: string; hold: string; wallet: string; key: number; amount: number; cost?: number; pt?: number; ct?: number; at: number }) : null;
      if (e?.type !== "charge") continue;
      books.outboxCharges.push({ eventId: `charge:${e.hold}`, wallet: e.wallet, keyId: e.key, amount: e.amount, cost: e.cost ?? 0, pt: e.pt ?? 0, ct: e.ct ?? 0, at: e.at });
    }
    return books;
  }
  throw new Error(`shard ${shard}: holds opened faster than the audit could read them; run it again`);
}

/**
 * Credits applied in Redis while Postgres was down (Credits.addSettled), by event id. Read after the shards and
 * before the Postgres snapshot: such a credit leaves this hash only once Postgres has it, so every credit the
 * shards showed is in one or the other.
 */
export async function readCreditOutbox(redis: RedisCommands, redisNames: RedisNames): Promise<Map<string, CreditInput>> {
  const all = await redis.hgetall(redisNames.creditOutbox);
  return new Map(Object.entries(all).map(([id, json]) => [id, JSON.parse(json) as CreditInput]));
}

/** Credits and keys whose Redis half landed after their shard's read (see `writtenSinceRead`). */
export interface LateWrites {
  credits: Set<string>;
  keys: Set<number>;
}

/**
 * Postgres is written first, Redis second (credits, key creation, revocation), so the Postgres snapshot can show
 * a write whose Redis half came after the shard's read. Asked again now: a credit Redis has applied since, or a
 * key Redis has since created or revoked, is that, not a difference.
 */
export async function writtenSinceRead(
  redis: RedisCommands,
  redisNames: RedisNames,
  candidates: { credits: { eventId: string; wallet: string }[]; keys: { id: number; wallet: string; revoked: boolean }[] },
): Promise<LateWrites> {
  const late: LateWrites = { credits: new Set(), keys: new Set() };
  if (candidates.credits.length + candidates.keys.length === 0) return late;
  const credited = await inChunks(candidates.credits, (c) => redis.hexists(redisNames.credited(redisNames.shardOf(c.wallet)), c.eventId));
  const revokedNow = await inChunks(candidates.keys, (k) => redis.hget(redisNames.apiKey(redisNames.shardOf(k.wallet), k.id), "revoked"));
  candidates.credits.forEach((c, i) => credited[i] === 1 && late.credits.add(c.eventId));
  candidates.keys.forEach((k, i) => {
    const revoked = revokedNow[i];
    if (revoked === (k.revoked ? "1" : "0")) late.keys.add(k.id);
  });
  return late;
}
