/**
 * The credits reconciler (the repair job's credits.reapplyPending): a credit half applied by a crash, on either
 * side, ends up applied exactly once. Real redis-server and Postgres, the gateway in process.
 */
import { describe, expect, test } from "bun:test";
import { sharedGateway } from "./helpers/gateway.ts";

const gw = sharedGateway();

describe("credits reconciler", () => {
  test("a credit in Postgres that never reached Redis is applied exactly once, however often the reconciler runs", async () => {
    const { wallet } = await gw.newWallet(1);
    const eventId = `grant:crashed-${crypto.randomUUID()}`;
    await gw.services.sql`
      INSERT INTO credits (event_id, wallet, kind, amount_usdc, reason) VALUES (${eventId}, ${wallet}, 'grant', 2500000, 'crash test')`;
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_000_000, locked: 0 });

    expect(await gw.services.credits.reapplyPending()).toBe(1);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 3_500_000, locked: 0 });
    expect(await gw.services.credits.reapplyPending()).toBe(0);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 3_500_000, locked: 0 });

    const [row] = await gw.services.sql<
      { applied: boolean }[]
    >`SELECT applied_at IS NOT NULL AS applied FROM credits WHERE event_id = ${eventId}`;
    expect(row!.applied).toBe(true);
  });

  test("a credit Redis applied but Postgres never marked (crash before the UPDATE) is not applied again", async () => {
    const { wallet } = await gw.newWallet(1);
    const eventId = `grant:crashed-${crypto.randomUUID()}`;
    await gw.services.sql`
      INSERT INTO credits (event_id, wallet, kind, amount_usdc, reason) VALUES (${eventId}, ${wallet}, 'grant', 700000, 'crash test')`;
    expect(await gw.services.ledger.credit(wallet, eventId, 700_000)).toEqual({ applied: true, balance: 1_700_000 });

    expect(await gw.services.credits.reapplyPending()).toBe(1);
    expect(await gw.services.credits.reapplyPending()).toBe(0);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_700_000, locked: 0 });

    // And the add() path, retried with the same id, is a duplicate that credits nothing.
    const again = await gw.services.credits.add({ eventId, wallet, kind: "grant", amountUsdc: 700_000 });
    expect(again).toMatchObject({ balance: 1_700_000, duplicate: true });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 1_700_000, locked: 0 });
  });
});
