/** The audit's read of one shard's Redis books as of one instant (audit.ts, step 2), apart from Postgres's. */
import type { RedisNames } from "../ledger/names.ts";
import type { LedgerScripts } from "../ledger/scripts.ts";
import { eventJson, ledgerEventId } from "../store/flusher.ts";
import type { ChargeRow } from "./postgres.ts";

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

/** A charge as the outbox carries it (settle's event): the same fields as its row in Postgres. */
export type ChargeEvent = ChargeRow;

/** One shard's Redis books as of one instant (see `readShard`). */
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
  /** Outbox length at the instant (charges and releases). */
  outboxEntries: number;
  outboxCharges: ChargeEvent[];
}

// A shard whose holds keep opening faster than two reads apart is read again, at most this often.
const MAX_READS = 20;

const num = (v: unknown) => (v === null || v === undefined ? 0 : Number(v));
const str = (v: unknown) => (v === null || v === undefined ? null : String(v));

/** The outbox and the credited hash are read this many entries per command (SCAN's COUNT for the hash). */
export const AUDIT_PAGE = 1000;

/** What one audit-3.lua call read: the shard's small books at one instant, and the sizes of its large ones. */
interface ShardInstant {
  books: ShardBooks;
  /** HLEN of the credited hash at the instant. */
  creditedCount: number;
  /** Id of the outbox's last entry at the instant ('' when it was empty). */
  outboxLast: string;
}

/**
 * Reads one shard as of one instant without holding Redis for more than a small script: the script reads the
 * wallets, keys and live holds (one slot, so it runs on a Redis Cluster too) and notes the credited hash's size
 * and the outbox's last id; the two large structures are read after it, in pages of `pageSize`:
 * - The outbox, up to that last id. Entries are append-only with rising ids, so nothing after the instant is read;
 *   an entry the flusher deletes meanwhile was deleted because Postgres has it, and Postgres is read after this
 *   (the audit counts a charge once, by event id, whichever store shows it).
 * - The credited hash, by HSCAN. Credits are only ever added, so a scan after the instant sees every credit of the
 *   instant, and one of the same size sees exactly those. When credits landed in between, the shard's small books
 *   are read again: a read after the scan that counts as many credits as the scan saw is exactly that set too.
 */
export async function readShard(
  scripts: LedgerScripts,
  redisNames: RedisNames,
  shard: string,
  wallets: string[],
  keyIds: number[],
  pageSize = AUDIT_PAGE,
): Promise<ShardBooks> {
  let read = await readInstant(scripts, redisNames, shard, wallets, keyIds);
  for (let tries = 0; tries < MAX_READS; tries++) {
    const credited = await scanCredited(scripts, redisNames.credited(shard), pageSize);
    if (credited.size !== read.creditedCount) read = await readInstant(scripts, redisNames, shard, wallets, keyIds);
    if (credited.size !== read.creditedCount) continue;
    read.books.credited = credited;
    read.books.outboxCharges = await readOutbox(scripts, redisNames.outbox(shard), read.outboxLast, pageSize);
    return read.books;
  }
  throw new Error(`shard ${shard}: credits applied faster than the audit could read them; run it again`);
}

/**
 * One audit-3.lua call. The hold markers must be named in KEYS, so the holds are listed first; a hold opened
 * between that list and the script is seen in the script's own list of holds, and the shard is read again with it.
 */
async function readInstant(
  scripts: LedgerScripts,
  redisNames: RedisNames,
  shard: string,
  wallets: string[],
  keyIds: number[],
): Promise<ShardInstant> {
  let holdIds = (await scripts.client.send("ZRANGE", [redisNames.holds(shard), "0", "-1"], redisNames.holds(shard))) as string[];
  for (let read = 0; read < MAX_READS; read++) {
    const names = [
      redisNames.holds(shard),
      redisNames.outbox(shard),
      redisNames.credited(shard),
      ...wallets.map((w) => redisNames.wallet(shard, w)),
      ...keyIds.map((k) => redisNames.apiKey(shard, k)),
      ...holdIds.map((h) => redisNames.holdMarker(shard, h)),
    ];
    const [now, w, k, m, holds, creditedCount, outboxEntries, outboxLast] = (await scripts.audit(names, [
      wallets.length,
      keyIds.length,
    ])) as [string, (unknown[] | null)[], unknown[][], (string | null)[], string[], number, number, string];
    const marker = new Map(holdIds.map((h, i) => [h, m[i] ?? null]));
    if (holds.some((h) => !marker.has(h))) {
      holdIds = holds;
      continue;
    }
    const books: ShardBooks = {
      shard,
      nowMs: Number(now),
      wallets: new Map(),
      keys: new Map(),
      liveHolds: [],
      credited: new Map(),
      outboxEntries: Number(outboxEntries),
      outboxCharges: [],
    };
    wallets.forEach((wallet, i) => {
      const [balance, locked] = w[i] ?? [];
      books.wallets.set(wallet, balance == null && locked == null ? null : { balance: num(balance), locked: num(locked) });
    });
    keyIds.forEach((id, i) => {
      const f = k[i] ?? [];
      books.keys.set(
        id,
        f.every((v) => v == null)
          ? null
          : {
              revoked: str(f[0]),
              budget: str(f[1]),
              spent: num(f[2]),
              locked: num(f[3]),
              requests: num(f[4]),
              promptTokens: num(f[5]),
              completionTokens: num(f[6]),
              revenue: num(f[7]),
            },
      );
    });
    for (const holdId of holds) {
      const live = /^live\|(-?\d+)\|([^|]*)\|(.*)$/.exec(marker.get(holdId) ?? "");
      if (live) books.liveHolds.push({ holdId, amount: Number(live[1]), wallet: live[2]!, keyId: Number(live[3]) });
    }
    return { books, creditedCount: Number(creditedCount), outboxLast: String(outboxLast) };
  }
  throw new Error(`shard ${shard}: holds opened faster than the audit could read them; run it again`);
}

/** The whole credited hash, a page per HSCAN (a scan may return a field twice: the map keeps it once). */
async function scanCredited(scripts: LedgerScripts, key: string, pageSize: number): Promise<Map<string, number>> {
  const credited = new Map<string, number>();
  let cursor = "0";
  do {
    const [next, flat] = (await scripts.client.send("HSCAN", [key, cursor, "COUNT", String(pageSize)], key)) as [string, string[]];
    for (let i = 0; i + 1 < flat.length; i += 2) credited.set(flat[i]!, Number(flat[i + 1]));
    cursor = String(next);
  } while (cursor !== "0");
  return credited;
}

/** The outbox's charges up to `last` (inclusive), a page per XRANGE. */
async function readOutbox(scripts: LedgerScripts, key: string, last: string, pageSize: number): Promise<ChargeEvent[]> {
  const charges: ChargeEvent[] = [];
  for (let from = "-"; last !== "";) {
    const page = (await scripts.client.send("XRANGE", [key, from, last, "COUNT", String(pageSize)], key)) as [string, string[] | null][];
    for (const [, fields] of page) {
      const json = eventJson(fields);
      const events = json
        ? (JSON.parse(`[${json}]`) as {
            type: string;
            hold: string;
            wallet: string;
            key: number;
            amount: number;
            cost?: number;
            pt?: number;
            ct?: number;
            at: number;
          }[])
        : [];
      for (const e of events) {
        if (e.type !== "charge") continue;
        charges.push({
          eventId: ledgerEventId(e.type, e.hold),
          wallet: e.wallet,
          keyId: e.key,
          amount: e.amount,
          cost: e.cost ?? 0,
          pt: e.pt ?? 0,
          ct: e.ct ?? 0,
          at: e.at,
        });
      }
    }
    if (page.length < pageSize) break;
    from = `(${page[page.length - 1]![0]}`;
  }
  return charges;
}
