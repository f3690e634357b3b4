/**
 * What Redis should hold as of each shard's read, summed from Postgres and the outboxes (charges per key and wallet,
 * credits per wallet, the money on its way), apart from compare.ts, which sets these sums against Redis field by field.
 */
import type { RedisNames } from "../ledger/names.ts";
import type { CreditInput } from "../store/credits.ts";
import type { PostgresBooks } from "./postgres.ts";
import type { LateWrites } from "./inFlight.ts";
import type { LedgerNames } from "./ledgerNames.ts";
import type { ChargeEvent, ShardBooks } from "./redis.ts";
import type { Difference } from "./types.ts";

/** A key's charges summed: µUSDC, requests, prompt and completion tokens, revenue. */
export type Sums = { amount: number; count: number; pt: number; ct: number; revenue: number };
export const zero = (): Sums => ({ amount: 0, count: 0, pt: 0, ct: 0, revenue: 0 });
const fromEvent = (e: Omit<ChargeEvent, "eventId">): Sums => ({
  amount: e.amount,
  count: 1,
  pt: e.pt,
  ct: e.ct,
  revenue: e.amount - e.cost,
});

/** The shard reads, with the two look-ups every sum makes in them. */
export interface Scope {
  redisNames: RedisNames;
  shards: ShardBooks[];
  /** Whether the wallet was in its shard's read: one created during the audit is left to the next. */
  audited: (wallet: string) => boolean;
  /** The read of the wallet's shard. */
  books: (wallet: string) => ShardBooks;
}

/** The scope of one pass: the shards read and the wallets they listed. */
export function auditScope(redisNames: RedisNames, names: LedgerNames, shards: ShardBooks[]): Scope {
  const shardOf = new Map(shards.map((s) => [s.shard, s]));
  return {
    redisNames,
    shards,
    audited: (wallet) => names.byShard.get(redisNames.shardOf(wallet))?.wallets.has(wallet) ?? false,
    books: (wallet) => shardOf.get(redisNames.shardOf(wallet))!,
  };
}

/**
 * Charges as of each shard's read, per key and per wallet: in Postgres and stamped before the read, or still in the
 * outbox (the same event counted once). `flushed` and `queued` total those in Postgres and in the outbox; a charge
 * whose amount differs between the two is added to `diffs`.
 */
export function expectedCharges({ shards, audited, books }: Scope, pg: PostgresBooks, diffs: Difference[]) {
  const byKey = new Map<number, Sums>();
  const byWallet = new Map<string, number>();
  const add = (wallet: string, keyId: number, s: Sums, sign: 1 | -1) => {
    const k = byKey.get(keyId) ?? zero();
    ((k.amount += sign * s.amount),
      (k.count += sign * s.count),
      (k.pt += sign * s.pt),
      (k.ct += sign * s.ct),
      (k.revenue += sign * s.revenue));
    byKey.set(keyId, k);
    byWallet.set(wallet, (byWallet.get(wallet) ?? 0) + sign * s.amount);
  };
  const outbox = new Map<string, ChargeEvent>(shards.flatMap((s) => s.outboxCharges.map((e) => [e.eventId, e] as const)));
  const since = Math.min(...shards.map((s) => s.nowMs));
  let flushed = zero();
  const count = (wallet: string, keyId: number, s: Sums, sign: 1 | -1) => {
    add(wallet, keyId, s, sign);
    flushed = { ...flushed, amount: flushed.amount + sign * s.amount, count: flushed.count + sign * s.count };
  };
  for (const c of pg.chargesBefore) if (audited(c.wallet)) count(c.wallet, c.keyId, c, 1);
  // A charge stamped at or after its shard's read was settled after it (Redis's balance does not show it yet).
  for (const r of pg.chargesSince)
    if (audited(r.wallet) && !outbox.has(r.eventId) && r.at < books(r.wallet).nowMs) count(r.wallet, r.keyId, fromEvent(r), 1);
  // In the outbox and already in Postgres: counted once, from the outbox.
  for (const x of pg.chargesInOutbox) {
    if (!audited(x.wallet)) continue;
    if (x.at < since) count(x.wallet, x.keyId, fromEvent(x), -1);
    const o = outbox.get(x.eventId)!;
    if (o.amount !== x.amount)
      diffs.push({ subject: `charge ${x.eventId}`, field: "amount", redis: o.amount, expected: x.amount, unit: "usd" });
  }
  const queued = zero();
  for (const o of outbox.values()) {
    if (!audited(o.wallet)) continue;
    add(o.wallet, o.keyId, fromEvent(o), 1);
    ((queued.amount += o.amount), queued.count++);
  }
  return { byKey, byWallet, flushed, queued };
}

/**
 * Credits per wallet as Redis should have applied them. Postgres records a credit before Redis applies it; one only
 * in Redis is in Redis's credit outbox, else it is stray. What disagrees is added to `diffs`.
 */
export function expectedCredits(
  { redisNames, shards, audited, books }: Scope,
  pg: PostgresBooks,
  creditOutbox: Map<string, CreditInput>,
  late: LateWrites,
  diffs: Difference[],
) {
  const creditsOf = new Map<string, number>();
  const pgCredits = new Map(pg.credits.map((c) => [c.eventId, c]));
  const applied = { count: 0, usdc: 0 };
  const unapplied = { count: 0, usdc: 0 };
  const counts = (wallet: string, amount: number) => {
    creditsOf.set(wallet, (creditsOf.get(wallet) ?? 0) + amount);
    (applied.count++, (applied.usdc += amount));
  };
  for (const c of pg.credits) {
    if (!audited(c.wallet)) continue;
    const inRedis = books(c.wallet).credited.get(c.eventId);
    if (inRedis !== undefined) {
      counts(c.wallet, c.amount);
      if (inRedis !== c.amount)
        diffs.push({ subject: `credit ${c.eventId}`, field: "amount", redis: inRedis, expected: c.amount, unit: "usd" });
    } else if (c.applied && !late.credits.has(c.eventId)) {
      counts(c.wallet, c.amount); // so the wallet's balance shows what is missing
      diffs.push({ subject: `credit ${c.eventId}`, field: "applied", redis: "missing", expected: "applied", unit: "text" });
    } else {
      (unapplied.count++, (unapplied.usdc += c.amount));
    }
  }
  const deferred = { count: 0, usdc: 0 };
  for (const s of shards) {
    for (const [eventId, amount] of s.credited) {
      if (pgCredits.has(eventId)) continue;
      const d = creditOutbox.get(eventId);
      if (d && redisNames.shardOf(d.wallet) === s.shard) {
        if (audited(d.wallet)) counts(d.wallet, amount);
        (deferred.count++, (deferred.usdc += amount));
      } else {
        diffs.push({
          subject: `credit ${eventId}`,
          field: "amount",
          redis: amount,
          expected: null,
          unit: "usd",
          stray: { key: redisNames.credited(s.shard), field: eventId },
        });
      }
    }
  }
  return { creditsOf, applied, unapplied, deferred };
}
