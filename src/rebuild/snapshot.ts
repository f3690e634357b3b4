/**
 * What a rebuild reads: one consistent moment of Postgres (balances, credits, keys and their counters) and the
 * holds still live in Redis, which survive a rebuild.
 */
import type { Ledger } from "../ledger/ledger.ts";
import type { Sql } from "../store/db.ts";

/** What readSnapshot read. */
export type Snapshot = Awaited<ReturnType<typeof readSnapshot>>;

/** Everything the ledger is built from, read in one REPEATABLE READ read-only transaction: one moment of Postgres. */
export function readSnapshot(sql: Sql) {
  return sql.begin("isolation level repeatable read read only", async (tx) => {
    const wallets = await tx<{ wallet: string; balance: number }[]>`
      SELECT wallet, SUM(amount)::bigint AS balance FROM (
        SELECT wallet, amount_usdc AS amount FROM credits
        UNION ALL SELECT wallet, -amount_usdc FROM ledger_events WHERE type = 'charge'
      ) m GROUP BY wallet`;
    const credits = await tx<{ id: number; wallet: string; event_id: string; amount_usdc: number; applied: boolean }[]>`
      SELECT id, wallet, event_id, amount_usdc, applied_at IS NOT NULL AS applied FROM credits`;
    const apiKeys = await tx<
      {
        id: number;
        wallet: string;
        key_hash: string;
        budget_usdc: number | null;
        revoked: boolean;
        requests: number;
        pt: number;
        ct: number;
        cpt: number;
        cwt: number;
        spent: number;
        revenue: number;
        models: string | null;
        requests_per_minute: number | null;
      }[]
    >`
      SELECT k.id, k.wallet, k.key_hash, k.budget_usdc, k.revoked_at IS NOT NULL AS revoked, k.models, k.requests_per_minute,
             COUNT(e.event_id)::bigint AS requests,
             COALESCE(SUM(e.prompt_tokens), 0)::bigint AS pt, COALESCE(SUM(e.completion_tokens), 0)::bigint AS ct,
             COALESCE(SUM(e.cached_prompt_tokens), 0)::bigint AS cpt,
             COALESCE(SUM(e.cache_write_tokens + e.cache_write_1h_tokens), 0)::bigint AS cwt,
             COALESCE(SUM(e.amount_usdc), 0)::bigint AS spent, COALESCE(SUM(e.amount_usdc - e.cost_usd_micro), 0)::bigint AS revenue
      FROM api_keys k LEFT JOIN ledger_events e ON e.api_key_id = k.id AND e.type = 'charge'
      GROUP BY k.id`;
    return { wallets: [...wallets], credits: [...credits], apiKeys: [...apiKeys] };
  });
}

/** Σ live holds per wallet hash and per key hash (Redis key names): holds survive a rebuild, so their locks do. */
export async function liveHolds(ledger: Ledger) {
  const k = ledger.names;
  const wallets = new Map<string, number>();
  const keys = new Map<string, number>();
  let count = 0;
  for (const s of k.allShards()) {
    const ids = await ledger.redis.zrange(k.holds(s), "0", "-1");
    for (let i = 0; i < ids.length; i += 500) {
      const markers = await ledger.redis.mget(ids.slice(i, i + 500).map((id) => k.holdMarker(s, id)));
      for (const m of markers) {
        const live = m && /^live\|(\d+)\|([^|]*)\|(.*)$/.exec(m);
        if (!live) continue;
        const [, amount, wallet, keyId] = live;
        const w = k.wallet(s, wallet!);
        const key = k.apiKey(s, keyId!);
        wallets.set(w, (wallets.get(w) ?? 0) + Number(amount));
        keys.set(key, (keys.get(key) ?? 0) + Number(amount));
        count++;
      }
    }
  }
  return { wallets, keys, count };
}

/** What liveHolds read. */
export type LiveHolds = Awaited<ReturnType<typeof liveHolds>>;
