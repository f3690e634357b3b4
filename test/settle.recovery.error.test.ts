/**
 * A served answer's charge is never given away: a long stream keeps its hold alive, and a settle that could not
 * reach Redis is kept in Postgres and posted later, exactly once, even after the sweeper expired the hold.
 * Real redis-server and Postgres; the ledger driven directly.
 */
import { describe, expect, test } from "bun:test";
import type { KeyPrincipal } from "../src/ledger/ledger.ts";
import { sharedGateway } from "./helpers/gateway.ts";
import { captureErrors } from "./helpers/logs.ts";

const gw = sharedGateway();
const errors = captureErrors(/"deferred settle: Redis no longer knows the hold/);

const details = { promptTokens: 11, completionTokens: 5, costMicro: 62, model: "standin/echo" };

async function holdFor(usd: number, amount: number): Promise<{ p: KeyPrincipal; wallet: string; holdId: string }> {
  const { wallet, keyId } = await gw.newWallet(usd);
  const p = gw.services.ledger.principal(keyId, wallet);
  const holdId = crypto.randomUUID();
  await gw.services.ledger.reserve(p, holdId, amount);
  return { p, wallet, holdId };
}

const expiry = (p: KeyPrincipal, holdId: string) => gw.services.redis.zscore(gw.services.ledger.names.holds(p.shard), holdId);

async function charges(holdId: string) {
  await gw.services.flusher.drain();
  return [
    ...(await gw.services.sql<
      { amount_usdc: number }[]
    >`SELECT amount_usdc FROM ledger_events WHERE hold_id = ${holdId} AND type = 'charge'`),
  ];
}

describe("a long stream keeps its hold", () => {
  test("extendHold pushes a live hold's expiry forward, and never revives a resolved one", async () => {
    const { p, holdId } = await holdFor(1, 10_000);
    const ledger = gw.services.ledger;
    // Pretend the hold is about to expire, then refresh it as a running stream does.
    await gw.services.redis.zadd(ledger.names.holds(p.shard), "XX", Date.now() + 1_000, holdId);
    expect(await ledger.extendHold(p, holdId)).toBe(true);
    expect(Number(await expiry(p, holdId))).toBeGreaterThan(Date.now() + ledger.holdRefreshMs);
    expect(await ledger.sweepExpired()).toBe(0);

    expect(await ledger.settle(p, holdId, 7_000, details)).toBe(true);
    expect(await ledger.extendHold(p, holdId)).toBe(false);
    expect(await expiry(p, holdId)).toBeNull();
  });
});

describe("a settle that could not reach Redis is posted later from Postgres", () => {
  test("posted once: the balance and ledger_events get the charge; a second replay does nothing", async () => {
    const { p, wallet, holdId } = await holdFor(1, 10_000);
    await gw.services.pendingSettles.record({ holdId, wallet, keyId: p.keyId, charge: 7_000, details });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 10_000 });

    expect(await gw.services.pendingSettles.replay()).toBe(1);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 993_000, locked: 0 });
    expect(await charges(holdId)).toEqual([{ amount_usdc: 7_000 }]);
    const [left] = await gw.services.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM pending_settles`;
    expect(left!.n).toBe(0);

    expect(await gw.services.pendingSettles.replay()).toBe(0);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 993_000, locked: 0 });
  });

  test("a deferred charge keeps its prompt's cache split: posted with it to the key's counters and the charge row", async () => {
    const { p, wallet, holdId } = await holdFor(1, 10_000);
    const split = { cachedPromptTokens: 6, cacheWriteTokens: 3, cacheWrite1hTokens: 2 };
    await gw.services.pendingSettles.record({ holdId, wallet, keyId: p.keyId, charge: 7_000, details: { ...details, ...split } });
    expect(await gw.services.pendingSettles.replay()).toBe(1);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 993_000, locked: 0 });
    await gw.services.flusher.drain();
    const rows = await gw.services.sql`
      SELECT prompt_tokens, cached_prompt_tokens, cache_write_tokens, cache_write_1h_tokens FROM ledger_events
      WHERE hold_id = ${holdId} AND type = 'charge'`;
    expect([...rows]).toEqual([{ prompt_tokens: 11, cached_prompt_tokens: 6, cache_write_tokens: 3, cache_write_1h_tokens: 2 }]);
    expect(await gw.services.redis.hmget(p.apiKeyName, "cached_prompt_tokens", "cache_write_tokens")).toEqual(["6", "5"]);
  });

  test("a hold Redis no longer knows (data loss) is not dropped: the charge stays, marked for an operator", async () => {
    const { wallet, keyId } = await gw.newWallet(1);
    const holdId = crypto.randomUUID(); // never reserved here: as after Redis lost it
    await gw.services.pendingSettles.record({ holdId, wallet, keyId, charge: 7_000, details });
    expect(await gw.services.pendingSettles.replay()).toBe(1);
    expect(errors.take(/"deferred settle: Redis no longer knows the hold/)).toEqual([
      expect.objectContaining({ hold: holdId, charge: 7_000 }),
    ]);
    const rows = await gw.services.sql<{ unresolved: boolean; charge_usdc: number }[]>`
      SELECT unresolved, charge_usdc FROM pending_settles WHERE hold_id = ${holdId}`;
    expect([...rows]).toEqual([{ unresolved: true, charge_usdc: 7_000 }]);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });
    expect(await gw.services.pendingSettles.replay()).toBe(0); // not retried every round
  });

  test("a hold Redis no longer knows whose charge Postgres already has: dropped, nothing for an operator", async () => {
    // Settled and flushed, then the hold's marker lost (a failed-over master's last charge, posted again).
    const { p, wallet, holdId } = await holdFor(1, 10_000);
    expect(await gw.services.ledger.settle(p, holdId, 7_000, details)).toBe(true);
    expect(await charges(holdId)).toEqual([{ amount_usdc: 7_000 }]);
    await gw.services.redis.del(gw.services.ledger.names.holdMarker(p.shard, holdId));
    await gw.services.pendingSettles.record({ holdId, wallet, keyId: p.keyId, charge: 7_000, details });
    expect(await gw.services.pendingSettles.replay()).toBe(1);
    expect(errors.take(/"deferred settle: Redis no longer knows the hold/)).toEqual([]);
    const [left] = await gw.services.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM pending_settles WHERE hold_id = ${holdId}`;
    expect(left!.n).toBe(0);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 993_000, locked: 0 });
    expect(await charges(holdId)).toEqual([{ amount_usdc: 7_000 }]);
  });

  test("a hold the sweeper expired meanwhile is still charged (a late charge), and only once", async () => {
    const { p, wallet, holdId } = await holdFor(1, 10_000);
    await gw.services.redis.zadd(gw.services.ledger.names.holds(p.shard), "XX", 1, holdId);
    expect(await gw.services.ledger.sweepExpired()).toBe(1);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });

    await gw.services.pendingSettles.record({ holdId, wallet, keyId: p.keyId, charge: 7_000, details });
    await gw.services.pendingSettles.record({ holdId, wallet, keyId: p.keyId, charge: 7_000, details }); // recorded once
    expect(await gw.services.pendingSettles.replay()).toBe(1);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 993_000, locked: 0 });
    expect(await charges(holdId)).toEqual([{ amount_usdc: 7_000 }]);
  });
});
