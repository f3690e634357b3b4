import { describe, expect, test } from "bun:test";
import { expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { usageFor } from "./helpers/openaiStandin.ts";

const gw = sharedGateway();

const messages = [{ role: "user" as const, content: "Say hello." }];
const usage = usageFor(messages.length);
const charge = expectedCharge(usage.prompt_tokens, usage.completion_tokens);
const utcDay = (offsetDays: number) => new Date(Date.now() + offsetDays * 86_400_000).toISOString().slice(0, 10);

async function chat(key: string, n: number) {
  for (let i = 0; i < n; i++) await gw.openai(key).chat.completions.create({ model: "standin/echo", messages, max_tokens: 50 });
}

describe("GET /v1/usage/{wallet}/daily", () => {
  test("charges per UTC day and key, every day of the range listed, from the system of record", async () => {
    const { account, wallet, key, keyId } = await gw.newWallet(10);
    const second = await gw.call("POST", "/v1/auth/keys", { ...(await gw.signIn(account)), label: "second" });
    expect(second.status).toBe(201);
    await chat(key, 3);
    await chat(second.body.key, 1);
    await gw.services.flusher.drain();
    // Two of the first key's charges happened two days ago (the record of an earlier day).
    await gw.services.sql`
      UPDATE ledger_events SET occurred_at = occurred_at - interval '2 days'
      WHERE event_id IN (SELECT event_id FROM ledger_events WHERE wallet = ${wallet} AND api_key_id = ${keyId} AND type = 'charge' LIMIT 2)`;

    const q = new URLSearchParams({ ...(await gw.signIn(account)), days: "7" });
    const res = await gw.call("GET", `/v1/usage/${account.address}/daily?${q}`);
    expect(res.status).toBe(200);
    const row = (id: number, n: number) => ({
      api_key_id: id,
      request_count: n,
      total_prompt_tokens: n * usage.prompt_tokens,
      total_completion_tokens: n * usage.completion_tokens,
      total_charged_usdc: n * charge,
    });
    expect(res.body.wallet).toBe(wallet);
    expect(res.body.from).toBe(utcDay(-6));
    expect(res.body.to).toBe(utcDay(0));
    expect(res.body.days.map((d: { date: string }) => d.date)).toEqual([-6, -5, -4, -3, -2, -1, 0].map(utcDay));
    const byDate = Object.fromEntries(res.body.days.map((d: { date: string }) => [d.date, d]));
    expect(byDate[utcDay(-2)]).toEqual({ date: utcDay(-2), total_charged_usdc: 2 * charge, keys: [row(keyId, 2)] });
    expect(byDate[utcDay(0)]).toEqual({ date: utcDay(0), total_charged_usdc: 2 * charge, keys: [row(keyId, 1), row(second.body.id, 1)] });
    expect(byDate[utcDay(-1)]).toEqual({ date: utcDay(-1), total_charged_usdc: 0, keys: [] });

    // The days agree with the live totals of /v1/usage once the outbox is drained.
    const live = await gw.call("GET", `/v1/usage/${wallet}`, undefined, { authorization: `Bearer ${key}` });
    const liveTotal = live.body.keys.reduce((s: number, k: { total_charged_usdc: number }) => s + k.total_charged_usdc, 0);
    expect(res.body.days.reduce((s: number, d: { total_charged_usdc: number }) => s + d.total_charged_usdc, 0)).toBe(liveTotal);
  });

  test("an API key of the wallet works too; the default range is 30 days; a day before the range is left out", async () => {
    const { wallet, key } = await gw.newWallet(10);
    await chat(key, 1);
    await gw.services.flusher.drain();
    await gw.services.sql`UPDATE ledger_events SET occurred_at = now() - interval '30 days' WHERE wallet = ${wallet}`;
    const res = await gw.call("GET", `/v1/usage/${wallet}/daily`, undefined, { authorization: `Bearer ${key}` });
    expect(res.status).toBe(200);
    expect(res.body.days).toHaveLength(30);
    expect(res.body.from).toBe(utcDay(-29));
    expect(res.body.days.every((d: { total_charged_usdc: number }) => d.total_charged_usdc === 0)).toBe(true);
  });

  test("a wallet without charges gets every day at zero", async () => {
    const { wallet, key } = await gw.newWallet(0);
    const res = await gw.call("GET", `/v1/usage/${wallet}/daily?days=1`, undefined, { authorization: `Bearer ${key}` });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ wallet, from: utcDay(0), to: utcDay(0), days: [{ date: utcDay(0), total_charged_usdc: 0, keys: [] }] });
  });

  test("the route is in the OpenAPI document", async () => {
    const res = await gw.call("GET", "/docs/json");
    expect(res.status).toBe(200);
    const op = res.body.paths["/v1/usage/{wallet}/daily"]?.get;
    expect(op?.summary).toContain("Spend per day");
    expect(JSON.stringify(op.parameters)).toContain("days");
  });
});
