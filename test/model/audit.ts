/**
 * `admin audit`'s comparison (src/audit) run on the model test's Redis: each shard read as the audit reads it
 * (audit-3.lua, the outbox and credited hash in pages), compared by compareBooks with the books Postgres would
 * hold, taken from the reference model (every credit applied, every key as created or revoked, every charge still
 * in the outbox: this test runs no flusher).
 */
import { compareBooks } from "../../src/audit/compare.ts";
import type { Difference } from "../../src/audit/types.ts";
import type { PostgresBooks } from "../../src/audit/postgres.ts";
import { readShard } from "../../src/audit/redis.ts";
import type { LedgerUnderTest } from "./workload.ts";
import type { ReferenceModel } from "./reference.ts";

/** The audit's differences between Redis and the model's books ([] when it is clean). */
export async function auditDifferences(m: ReferenceModel, sut: LedgerUnderTest, pageSize = 500): Promise<Difference[]> {
  const { names, scripts } = sut;
  const byShard = new Map(names.allShards().map((s) => [s, { wallets: new Set<string>(), keyIds: new Set<number>() }]));
  for (const w of m.wallets) byShard.get(w.shard)!.wallets.add(w.addr);
  for (const k of m.keyList) byShard.get(k.p.shard)!.keyIds.add(k.id);
  const shards = [];
  for (const [shard, n] of byShard) shards.push(await readShard(scripts, names, shard, [...n.wallets], [...n.keyIds], pageSize));
  const pg: PostgresBooks = {
    credits: [...m.credited.values()].flatMap((byId) =>
      [...byId].map(([eventId, c]) => ({ eventId, wallet: c.wallet.addr, amount: c.amount, applied: true })),
    ),
    apiKeys: new Map(m.keyList.map((k) => [k.id, { wallet: k.wallet.addr, budget: k.budget, revoked: k.revoked }])),
    chargesBefore: [],
    chargesSince: [],
    chargesInOutbox: [],
    pendingSettles: { count: 0, amount: 0, unresolved: 0 },
    uptoSettles: { count: 0, amount: 0, failing: 0 },
  };
  const late = { credits: new Set<string>(), keys: new Set<number>() };
  const pass = compareBooks(names, { byShard, misplaced: [] }, shards, new Map(), pg, late);
  // It compared every wallet and key (an empty read would find no difference either).
  const counted = Object.fromEntries(pass.totals.map((t) => [t.label, t.redis]));
  if (counted.wallets !== m.wallets.length || counted["api keys"] !== m.keyList.length)
    throw new Error(`audit read too little: ${JSON.stringify(counted)}`);
  return pass.differences;
}
