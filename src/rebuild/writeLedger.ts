import { limitsOfRow, rebuiltKeyFields } from "../ledger/apiKeyState.ts";
import type { Ledger } from "../ledger/ledger.ts";
import { inChunks, scanKeys } from "../redis/connect.ts";
import { FencedShardWriter } from "./batch.ts";
import type { RebuildLock } from "./lock.ts";
import type { LiveHolds, Snapshot } from "./snapshot.ts";

/**
 * Writes the snapshot shard by shard through fenced batches (rebuild-write-2.lua, on the shard's master), each
 * landing only while the shard's fence is still this rebuild's. Per shard the applied credit ids go first, then
 * balances and key state, and ids Postgres does not know are dropped last: a rebuild stopped between two batches
 * never leaves a balance that includes a credit the credited hash lacks (the reconciler would apply it again).
 * Returns each shard's fence as its last batch left it, the only one the shard is opened from.
 */
export async function writeLedger(
  ledger: Ledger,
  lock: RebuildLock,
  closed: string,
  snap: Snapshot,
  held: LiveHolds,
): Promise<Map<string, string>> {
  const { redis, names: k } = ledger;
  const shards = new Map(
    k
      .allShards()
      .map((s) => [s, { credits: new Map<string, number>(), wallets: new Map<string, number>(), keys: [] as Snapshot["apiKeys"] }]),
  );
  const of = (wallet: string) => shards.get(k.shardOf(wallet))!;
  const written = new Map<string, string>();
  for (const c of snap.credits) of(c.wallet).credits.set(c.event_id, c.amount_usdc);
  for (const w of snap.wallets) of(w.wallet).wallets.set(k.wallet(k.shardOf(w.wallet), w.wallet), w.balance);
  for (const key of snap.apiKeys) of(key.wallet).keys.push(key);
  // A wallet hash Postgres knows nothing of holds no money (a tampered or stray write); its live holds stay locked.
  const others = new Set(held.wallets.keys());
  for await (const names of scanKeys(redis, k.walletPattern)) for (const n of names) if (k.isWallet(n)) others.add(n);
  for (const name of others) {
    const shard = shards.get(k.parseRecord(name)?.shard ?? "");
    if (shard && !shard.wallets.has(name)) shard.wallets.set(name, 0);
  }

  for (const [s, plan] of shards) {
    const w = new FencedShardWriter(ledger, lock, s, closed);
    await w.hset(k.credited(s), Object.fromEntries(plan.credits));
    for (const [name, balance] of plan.wallets) await w.hset(name, { balance, locked: held.wallets.get(name) ?? 0 });
    for (const key of plan.keys) {
      const name = ledger.principal(key.id, key.wallet).apiKeyName;
      await w.hset(
        name,
        rebuiltKeyFields(
          { revoked: key.revoked, budget: key.budget_usdc },
          {
            spent: key.spent,
            locked: held.keys.get(name) ?? 0,
            requests: key.requests,
            prompt_tokens: key.pt,
            completion_tokens: key.ct,
            revenue: key.revenue,
            // As settle writes them: only once there is something to count.
            ...(Number(key.cpt) > 0 && { cached_prompt_tokens: key.cpt }),
            ...(Number(key.cwt) > 0 && { cache_write_tokens: key.cwt }),
          },
        ),
      );
    }
    // The credited hash is exactly the snapshot's credits (a credit applied before the fence closed is in it).
    await w.hdel(
      k.credited(s),
      (await redis.hkeys(k.credited(s))).filter((id) => !plan.credits.has(id)),
    );
    await w.flush();
    written.set(s, w.fence);
  }
  // Key hash -> "keyId|wallet[|rpm|models]" never changes, so a stale rebuild rewriting it is harmless: no fence needed. One
  // command each (on a cluster a pipeline may not span nodes), a thousand at a time.
  await inChunks(snap.apiKeys, (key) => ledger.apiKeys.writeMapping(ledger.principal(key.id, key.wallet, limitsOfRow(key)), key.key_hash));
  return written;
}
