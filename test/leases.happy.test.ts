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

  test("a request refused for credit this process's lease holds unused is served: the lease gives it back", async () => {
    const owner = await gw.newWallet(1);
    const other = await gw.call("POST", "/v1/auth/keys", { ...(await gw.signIn(owner.account)), label: "second" });
    expect(other.status).toBe(201);
    const hold = 4096 * 10 + 50; // the catalog's 4,096 output tokens at 10 µUSDC, and a short prompt's bound
    // The first key's lease opens at four of its holds.
    await gw.openai(owner.key).chat.completions.create(ask("open", { max_tokens: 4096 }));
    await gw.services.leases!.quiet();
    await gw.services.chat.idle();
    const leased = (await gw.ledgerState(owner.wallet)).locked;
    expect(leased).toBeGreaterThanOrEqual(4 * 4096 * 10);
    // The second key's streams hold all but less than one hold of the rest.
    const streams: AbortController[] = [];
    const fits = Math.floor((1_000_000 - leased) / hold) - 1;
    for (let i = 0; i < fits; i++) {
      const abort = new AbortController();
      const res = await gw.handle(
        new Request("https://gateway.test/v1/chat/completions", {
          method: "POST",
          headers: { authorization: `Bearer ${other.body.key}`, "content-type": "application/json" },
          body: JSON.stringify(ask("wait", { model: "standin/hang", stream: true, max_tokens: 4096 })),
          signal: abort.signal,
        }),
      );
      expect(res.status).toBe(200);
      streams.push(abort);
    }
    await gw.services.leases!.quiet();
    const state = await gw.ledgerState(owner.wallet);
    expect(state.balance - state.locked).toBeLessThan(2 * hold);
    // Two more: at most one fits outside the lease; the lease gives back what it does not use, and both are served.
    const more = await Promise.all([1, 2].map(() => gw.openai(other.body.key).chat.completions.create(ask("more", { max_tokens: 4096 }))));
    for (const m of more) expect(m.choices[0]!.message.content).toBe("Hello from the stand-in");
    for (const a of streams) a.abort();
    await gw.services.chat.idle();
    await gw.services.leases!.quiet();
    await expectAuditClean();
  });
});
