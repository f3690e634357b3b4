import type { RedisNames } from "../ledger/names.ts";
import type { CreditInput } from "../store/credits.ts";
import type { ChargeEvent, LateWrites, LedgerNames, ShardBooks } from "./redis.ts";
import type { PostgresBooks } from "./postgres.ts";

/** A field where Redis disagrees with what it should hold (from Postgres and the outbox, or from the live holds). */
export interface Difference {
  /** What disagrees: "wallet 0x…", "key 12", "credit <event id>", "redis <key name>". */
  subject: string;
  field: string;
  redis: number | string | null;
  expected: number | string | null;
  unit: "usd" | "count" | "text";
  /** Redis state Postgres does not know, which a rebuild (it writes only what Postgres has) would leave behind. */
  stray?: { key: string; field?: string };
}

/** One compared sum: Redis's and the expected one. */
export interface Total {
  label: string;
  redis: number;
  expected: number;
  unit: "usd" | "count";
}

/** Money on its way, not a difference: in the outbox, held, deferred or waiting to be applied. */
export interface InFlight {
  label: string;
  count: number;
  usdc: number;
  note?: string;
}

export interface AuditPass {
  differences: Difference[];
  totals: Total[];
  inFlight: InFlight[];
}

type Sums = { amount: number; count: number; pt: number; ct: number; revenue: number };
const zero = (): Sums => ({ amount: 0, count: 0, pt: 0, ct: 0, revenue: 0 });
const fromEvent = (e: Omit<ChargeEvent, "eventId">): Sums => ({
  amount: e.amount,
  count: 1,
  pt: e.pt,
  ct: e.ct,
  revenue: e.amount - e.cost,
});

/** Writes Postgres shows and the shard read did not: maybe their Redis half only came later (`writtenSinceRead`). */
export function lateCandidates(redisNames: RedisNames, names: LedgerNames, shards: ShardBooks[], pg: PostgresBooks) {
  const shard = new Map(shards.map((s) => [s.shard, s]));
  const audited = (wallet: string) => names.byShard.get(redisNames.shardOf(wallet))?.wallets.has(wallet) ?? false;
  const credits = pg.credits.filter(
    (c) => c.applied && audited(c.wallet) && !shard.get(redisNames.shardOf(c.wallet))!.credited.has(c.eventId),
  );
  const changedKeys: { id: number; wallet: string; revoked: boolean }[] = [];
  for (const s of shards) {
    for (const [id, r] of s.keys) {
      const p = pg.apiKeys.get(id);
      if (p && (!r || r.revoked !== (p.revoked ? "1" : "0"))) changedKeys.push({ id, ...p });
    }
  }
  return { credits, keys: changedKeys };
}

/**
 * Compares one Redis read (per shard, one instant each) with one later Postgres snapshot. Expected, per wallet:
 * balance = Σ credits Redis has applied − Σ charges (in Postgres and stamped before the shard's read, or still in
 * the outbox: the same event counted once); locked = Σ its live holds. Per key the same for spent and counters,
 * and revoked and budget as Postgres has them.
 */
export function compareBooks(
  redisNames: RedisNames,
  names: LedgerNames,
  shards: ShardBooks[],
  creditOutbox: Map<string, CreditInput>,
  pg: PostgresBooks,
  late: LateWrites,
): AuditPass {
  const diffs: Difference[] = [];
  const shardOf = new Map(shards.map((s) => [s.shard, s]));
  const books = (wallet: string) => shardOf.get(redisNames.shardOf(wallet))!;
  const audited = (wallet: string) => names.byShard.get(redisNames.shardOf(wallet))?.wallets.has(wallet) ?? false;
  const misplacedShard = (name: string) => redisNames.parseRecord(name)?.shard ?? "?";
  for (const m of names.misplaced)
    diffs.push({ subject: `redis ${m.redisKey}`, field: "shard", redis: misplacedShard(m.redisKey), expected: m.belongsIn, unit: "text" });

  // Charges as of each shard's read.
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

  // Credits: Postgres records them before Redis applies them; one only in Redis is in Redis's credit outbox.
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

  const totals = new Map<string, Total>();
  const total = (label: string, unit: Total["unit"], redis: number, expected: number) => {
    const t = totals.get(label) ?? { label, redis: 0, expected: 0, unit };
    ((t.redis += redis), (t.expected += expected));
    totals.set(label, t);
  };
  const check = (
    subject: string,
    field: string,
    unit: Difference["unit"],
    redis: number | string | null,
    expected: number | string | null,
  ) => {
    if (redis !== expected) diffs.push({ subject, field, redis, expected, unit });
  };
  const pgWallets = new Set([
    ...pg.credits.map((c) => c.wallet),
    ...[...pg.apiKeys.values()].map((k) => k.wallet),
    ...byWallet.keys(),
    ...[...creditOutbox.values()].map((c) => c.wallet),
  ]);
  let walletCount = 0;
  let keyCount = 0;
  const live = { count: 0, usdc: 0 };
  for (const s of shards) {
    const lockedOf = new Map<string, number>();
    const keyLockedOf = new Map<number, number>();
    for (const h of s.liveHolds) {
      lockedOf.set(h.wallet, (lockedOf.get(h.wallet) ?? 0) + h.amount);
      keyLockedOf.set(h.keyId, (keyLockedOf.get(h.keyId) ?? 0) + h.amount);
      (live.count++, (live.usdc += h.amount));
    }
    for (const [wallet, r] of s.wallets) {
      walletCount++;
      const balance = r?.balance ?? 0;
      const expected = (creditsOf.get(wallet) ?? 0) - (byWallet.get(wallet) ?? 0);
      const subject = `wallet ${wallet}`;
      if (balance !== expected) {
        diffs.push({
          subject,
          field: "balance",
          redis: balance,
          expected,
          unit: "usd",
          stray: pgWallets.has(wallet) ? undefined : { key: redisNames.wallet(s.shard, wallet) },
        });
      }
      check(subject, "locked", "usd", r?.locked ?? 0, lockedOf.get(wallet) ?? 0);
      total("balance (USD)", "usd", balance, expected);
      total("locked (USD) = Σ live holds", "usd", r?.locked ?? 0, lockedOf.get(wallet) ?? 0);
    }
    for (const [id, r] of s.keys) {
      keyCount++;
      const p = pg.apiKeys.get(id);
      const subject = `key ${id}`;
      if (!p) {
        if (r)
          diffs.push({
            subject,
            field: "record",
            redis: "present",
            expected: "not in Postgres",
            unit: "text",
            stray: { key: redisNames.apiKey(s.shard, id) },
          });
        continue;
      }
      if (!r) {
        if (!late.keys.has(id)) diffs.push({ subject, field: "record", redis: "missing", expected: "present", unit: "text" });
        continue;
      }
      const c = byKey.get(id) ?? zero();
      if (!late.keys.has(id)) check(subject, "revoked", "text", r.revoked, p.revoked ? "1" : "0");
      check(subject, "budget", "text", r.budget, p.budget === null ? "" : String(p.budget));
      const fields: [string, Total["unit"], number, number][] = [
        ["spent", "usd", r.spent, c.amount],
        ["locked", "usd", r.locked, keyLockedOf.get(id) ?? 0],
        ["requests", "count", r.requests, c.count],
        ["prompt_tokens", "count", r.promptTokens, c.pt],
        ["completion_tokens", "count", r.completionTokens, c.ct],
        ["revenue", "usd", r.revenue, c.revenue],
      ];
      for (const [field, unit, got, want] of fields) {
        check(subject, field, unit, got, want);
        total(`key ${field}${unit === "usd" ? " (USD)" : ""}`, unit, got, want);
      }
    }
  }

  const notAudited =
    [...pgWallets].filter((w) => !audited(w)).length +
    [...pg.apiKeys.keys()].filter((id) => !names.byShard.get(redisNames.shardOf(pg.apiKeys.get(id)!.wallet))?.keyIds.has(id)).length;
  const x = pg.chargesInOutbox.filter((c) => audited(c.wallet)).length;
  return {
    differences: diffs,
    totals: [
      { label: "wallets", redis: walletCount, expected: walletCount, unit: "count" },
      { label: "api keys", redis: keyCount, expected: keyCount, unit: "count" },
      ...totals.values(),
    ],
    inFlight: [
      { label: "credits applied", count: applied.count, usdc: applied.usdc },
      { label: "charges in Postgres", count: flushed.count, usdc: flushed.amount },
      {
        label: "charges in the outbox",
        count: queued.count,
        usdc: queued.amount,
        note: x > 0 ? `${x} of them already in Postgres, counted once` : undefined,
      },
      { label: "live holds", count: live.count, usdc: live.usdc },
      {
        label: "pending settles",
        count: pg.pendingSettles.count,
        usdc: pg.pendingSettles.amount,
        note: pg.pendingSettles.unresolved > 0 ? `${pg.pendingSettles.unresolved} unresolved: an operator decides` : undefined,
      },
      {
        label: "credits not yet applied",
        count: unapplied.count,
        usdc: unapplied.usdc,
        note: "applied_at NULL; the repair job applies them",
      },
      {
        label: "credits in Redis's credit outbox",
        count: deferred.count,
        usdc: deferred.usdc,
        note: "applied; Postgres gets them from the repair job",
      },
      ...(notAudited > 0
        ? [{ label: "created during the audit", count: notAudited, usdc: 0, note: "wallets and keys left to the next audit" }]
        : []),
    ],
  };
}
