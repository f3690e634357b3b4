import { describe, expect, test } from "bun:test";
import { auditLedger } from "../src/audit/audit.ts";
import { metrics } from "../src/observe/metrics.ts";
import { sharedGateway } from "./helpers/gateway.ts";

/** Credit leases on (CREDIT_LEASES=on): most requests are admitted in memory, charged exactly as with a hold each. */
const gw = sharedGateway({ CREDIT_LEASES: "on" });

const ask = (content: string, extra: Record<string, unknown> = {}) => ({
  model: "standin/echo",
  messages: [{ role: "user" as const, content }],
  max_tokens: 50,
  ...extra,
});

async function leaseAdmissions(): Promise<number> {
  const m = await metrics.leaseAdmissions.get();
  return m.values.find((v) => v.labels.outcome === "lease")?.value ?? 0;
}

async function expectAuditClean() {
  const s = gw.services;
  await s.chat.idle();
  const r = await auditLedger({ redis: s.redis, scripts: s.scripts, sql: s.sql, names: s.ledger.names });
  expect(r.differences).toEqual([]);
}

async function chargesOf(wallet: string): Promise<number[]> {
  await gw.services.chat.idle();
  await gw.services.flusher.drain();
  const rows = await gw.services.sql<{ amount_usdc: string }[]>`
    SELECT amount_usdc FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge'`;
  return rows.map((r) => Number(r.amount_usdc));
}

describe("credit leases", () => {
  test("after the first request opens a lease, requests are admitted from it and each is charged its exact usage", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const client = gw.openai(key);
    const first = await client.chat.completions.create(ask("one two three"));
    expect(first.choices[0]!.message.content).toBe("Hello from the stand-in");
    await gw.services.leases!.quiet();
    const holds = gw.services.ledger.names.holds(gw.services.ledger.principal(0, wallet).shard);
    const live = await gw.services.redis.zrange(holds, "0", "-1");
    expect(live.filter((id) => id.startsWith("L")).length).toBe(1);

    const before = await leaseAdmissions();
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => client.chat.completions.create(ask(`word ${i}`))));
    for (const [i, a] of answers.entries()) expect(a.choices[0]!.message.content).toBe("Hello from the stand-in");
    expect(await leaseAdmissions()).toBeGreaterThan(before);

    const usages = [first, ...answers].map((a) => a.usage!);
    const charges = await chargesOf(wallet);
    expect(charges.length).toBe(9);
    const billed = usages.map((u) => Math.ceil((u.prompt_tokens * 2_500_000 + u.completion_tokens * 10_000_000) / 1_000_000));
    expect(charges.sort()).toEqual(billed.sort());
    const total = billed.reduce((a, b) => a + b, 0);
    const state = await gw.ledgerState(wallet);
    expect(state.balance).toBe(10_000_000 - total);
    // The lease still locks part of the wallet while it is open; closed, nothing stays locked.
    expect(state.locked).toBeGreaterThan(0);
    await expectAuditClean();
    await gw.services.leases!.closeAll();
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - total, locked: 0 });
    await expectAuditClean();
  });
});
