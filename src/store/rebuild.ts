import type { Redis } from "ioredis";
import type { LedgerKeys } from "../ledger/keys.ts";
import { log } from "../log.ts";
import type { Sql } from "./db.ts";

const LOCK = "gw:ledger:rebuilding";

/**
 * Makes sure Redis holds the ledger before the gateway serves. A Redis that comes up empty (new, or lost its
 * data) is rebuilt from Postgres, the system of record: balances = Σ credits − Σ charges, key state and
 * counters from api_keys and charges, and every credit id marked applied. One process rebuilds; others wait.
 */
export async function ensureLedger(redis: Redis, sql: Sql, keys: LedgerKeys): Promise<"ready" | "rebuilt"> {
  for (let waited = 0; ; waited++) {
    if (await redis.exists(keys.ready)) return "ready";
    if (await redis.set(LOCK, String(process.pid), "PX", 120_000, "NX")) break;
    if (waited > 1200) throw new Error("another process holds the ledger rebuild lock for too long");
    await Bun.sleep(100);
  }
  try {
    if (await redis.exists(keys.ready)) return "ready";
    const counts = await rebuild(redis, sql, keys);
    await redis.set(keys.ready, new Date().toISOString());
    log.info("ledger built from Postgres", counts);
    return "rebuilt";
  } finally {
    await redis.del(LOCK);
  }
}

async function rebuild(redis: Redis, sql: Sql, keys: LedgerKeys) {
  // What Postgres knows. At start nothing serves yet; a rebuild while serving (Redis lost its data) runs with
  // this process's balance changes paused (Ledger.pausedWhile), and what moved meanwhile is caught up below.
  const wallets = await sql<{ wallet: string; balance: number }[]>`
    SELECT wallet, SUM(amount)::bigint AS balance FROM (
      SELECT wallet, amount_usdc AS amount FROM credits
      UNION ALL SELECT wallet, -amount_usdc FROM ledger_events WHERE type = 'charge'
    ) m GROUP BY wallet`;
  const credits = await sql<{ id: number; wallet: string; event_id: string; amount_usdc: number }[]>`
    SELECT id, wallet, event_id, amount_usdc FROM credits`;
  const apiKeys = await sql<
    { id: number; wallet: string; key_hash: string; budget_usdc: number | null; revoked: boolean; requests: number; pt: number; ct: number; spent: number; revenue: number }[]
  >`
    SELECT k.id, k.wallet, k.key_hash, k.budget_usdc, k.revoked_at IS NOT NULL AS revoked,
           COUNT(e.event_id)::bigint AS requests,
           COALESCE(SUM(e.prompt_tokens), 0)::bigint AS pt, COALESCE(SUM(e.completion_tokens), 0)::bigint AS ct,
           COALESCE(SUM(e.amount_usdc), 0)::bigint AS spent, COALESCE(SUM(e.amount_usdc - e.cost_usd_micro), 0)::bigint AS revenue
    FROM api_keys k LEFT JOIN ledger_events e ON e.api_key_id = k.id AND e.type = 'charge'
    GROUP BY k.id`;

  let p = redis.pipeline();
  const flushEvery = async (i: number) => {
    if (i % 1000 === 999) {
      await p.exec();
      p = redis.pipeline();
    }
  };
  for (const [i, w] of wallets.entries()) {
    p.hset(keys.wallet(keys.shardOf(w.wallet), w.wallet), "balance", w.balance, "locked", 0);
    await flushEvery(i);
  }
  for (const [i, c] of credits.entries()) {
    p.hset(keys.credited(keys.shardOf(c.wallet)), c.event_id, c.amount_usdc);
    await flushEvery(i);
  }
  for (const [i, k] of apiKeys.entries()) {
    const shard = keys.shardOf(k.wallet);
    p.hset(keys.apiKey(shard, k.id), {
      ...writeKeyState(k.revoked, k.budget_usdc),
      spent: k.spent, locked: 0, requests: k.requests, prompt_tokens: k.pt, completion_tokens: k.ct, revenue: k.revenue,
    });
    p.set(keys.keyHash(k.key_hash), `${k.id}|${k.wallet}`);
    await flushEvery(i);
  }
  await p.exec();
  // Only the credits in this rebuild are applied; one recorded since stays for the repair job.
  const lastCredit = credits.reduce((max, c) => Math.max(max, c.id), 0);
  await sql`UPDATE credits SET applied_at = now() WHERE applied_at IS NULL AND id <= ${lastCredit}`;
  // A key revoked while the rebuild ran (its Redis write then overwritten) stays revoked: Postgres is read again.
  const revoked = await sql<{ id: number; wallet: string }[]>`SELECT id, wallet FROM api_keys WHERE revoked_at IS NOT NULL`;
  if (revoked.length > 0) {
    const r = redis.pipeline();
    for (const k of revoked) r.hset(keys.apiKey(keys.shardOf(k.wallet), k.id), "revoked", "1");
    await r.exec();
  }
  return { wallets: wallets.length, credits: credits.length, keys: apiKeys.length };
}

/** Field/value pairs of a key's mutable state, as reserve-6.lua reads them. */
export function writeKeyState(revoked: boolean, budget: number | null): Record<string, string> {
  return { revoked: revoked ? "1" : "0", budget: budget === null ? "" : String(budget) };
}
