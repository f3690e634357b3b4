/**
 * The audit's comparison: each wallet's and key's fields in Redis set against the sums expected.ts builds, with the
 * totals and the money on its way that the report prints.
 */
import type { RedisNames } from "../ledger/names.ts";
import type { CreditInput } from "../store/credits.ts";
import { auditScope, expectedCharges, expectedCredits, zero } from "./expected.ts";
import type { LateWrites } from "./inFlight.ts";
import type { LedgerNames } from "./ledgerNames.ts";
import type { ShardBooks } from "./redis.ts";
import type { PostgresBooks } from "./postgres.ts";
import type { AuditPass, Difference, Total } from "./types.ts";

/** Writes Postgres shows and the shard read did not: maybe their Redis half only came later (`writtenSinceRead`). */
export function lateCandidates(redisNames: RedisNames, names: LedgerNames, shards: ShardBooks[], pg: PostgresBooks) {
  const { audited, books } = auditScope(redisNames, names, shards);
  const credits = pg.credits.filter((c) => c.applied && audited(c.wallet) && !books(c.wallet).credited.has(c.eventId));
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
  const scope = auditScope(redisNames, names, shards);
  const { audited } = scope;
  const misplacedShard = (name: string) => redisNames.parseRecord(name)?.shard ?? "?";
  for (const m of names.misplaced)
    diffs.push({ subject: `redis ${m.redisKey}`, field: "shard", redis: misplacedShard(m.redisKey), expected: m.belongsIn, unit: "text" });

  const { byKey, byWallet, flushed, queued } = expectedCharges(scope, pg, diffs);
  const { creditsOf, applied, unapplied, deferred } = expectedCredits(scope, pg, creditOutbox, late, diffs);

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
        label: "upto settlements to make",
        count: pg.uptoSettles.count,
        usdc: pg.uptoSettles.amount,
        note:
          pg.uptoSettles.failing > 0
            ? `${pg.uptoSettles.failing} failed so far; the repair job retries (upto_settles)`
            : "x402 upto calls served or serving; settled on chain for their charge",
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
