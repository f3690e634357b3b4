import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { PrivateKeyAccount } from "viem/accounts";
import { startChain, type DevChain } from "./helpers/chain.ts";
import { startFacilitator, startHangingFacilitator, type FacilitatorServer } from "./helpers/facilitator.ts";
import { startGateway, type TestGateway } from "./helpers/gateway.ts";
import { capturePayment, v1Fetch, v2Fetch } from "./helpers/x402.ts";
import { captureErrors } from "./helpers/logs.ts";

let chain: DevChain;
let facilitator: FacilitatorServer;
let hanging: { url: string; stop(): void };
let viaHttp: TestGateway;
const closed: TestGateway[] = [];

beforeAll(async () => {
  chain = await startChain();
  facilitator = await startFacilitator(chain);
  hanging = startHangingFacilitator();
  viaHttp = await startGateway({ ...chain.gatewayEnv(), FACILITATOR: "http", FACILITATOR_URL: facilitator.url });
}, 60_000);

// Six gateways to close (each drops its database): on a busy machine that passes the default 5 s.
afterAll(async () => {
  for (const g of [viaHttp, ...closed]) await g?.close();
  facilitator?.stop();
  hanging?.stop();
  await chain?.stop();
}, 30_000);

const args = (amount: number): [string, RequestInit] => [
  "https://gateway.test/v1/topup",
  { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ amount }) },
];

async function chainBalances(payer: PrivateKeyAccount) {
  return { payer: await chain.balanceOf(chain.usdc.address, payer.address), payTo: await chain.balanceOf(chain.usdc.address, chain.payTo) };
}

describe("HTTP facilitator (FACILITATOR_URL, x402's reference facilitator library behind /verify and /settle)", () => {
  test("x402-fetch (v1) top-up settles through it", async () => {
    const payer = await chain.newPayer();
    const before = await chainBalances(payer);
    const res = await v1Fetch(viaHttp.fetch, chain, payer)(...args(4));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ balance_usdc: 4_000_000, credited_usdc: 4_000_000 });
    const after = await chainBalances(payer);
    expect(before.payer - after.payer).toBe(4_000_000n);
    expect(after.payTo - before.payTo).toBe(4_000_000n);
    expect(facilitator.calls.slice(-2)).toEqual(["/verify", "/settle"]);
  });

  test("@x402/fetch (v2) top-up settles through it", async () => {
    const payer = await chain.newPayer();
    const res = await v2Fetch(viaHttp.fetch, chain, payer)(...args(1.5));
    expect(res.status).toBe(200);
    expect(await viaHttp.ledgerState(payer.address.toLowerCase())).toEqual({ balance: 1_500_000, locked: 0 });
  });
});

const errors = captureErrors(/"payment facilitator unavailable"/, /"credit not recorded in Postgres after retries/);

describe("facilitator unreachable or timing out: 503 {error}, nothing credited", () => {
  test.each([
    ["HTTP facilitator down (closed port)", () => ({ FACILITATOR: "http", FACILITATOR_URL: "http://127.0.0.1:9" })],
    ["HTTP facilitator that never answers", () => ({ FACILITATOR: "http", FACILITATOR_URL: hanging.url, FACILITATOR_TIMEOUT_MS: "300" })],
    ["in-process facilitator whose RPC is down", () => ({ FACILITATOR: "local", RPC_URL: "http://127.0.0.1:9" })],
  ])(
    "%s",
    async (_name, env) => {
      const gw = await startGateway({ ...chain.gatewayEnv(), ...env() });
      closed.push(gw);
      const payer = await chain.newPayer();
      const payment = await capturePayment(gw.fetch, (f) => v1Fetch(f, chain, payer), 5);
      const before = await chainBalances(payer);
      const res = await gw.call("POST", "/v1/topup", { amount: 5 }, { [payment.name]: payment.value });
      expect(res.status).toBe(503);
      expect(res.body).toEqual({ error: "payment facilitator unavailable" });
      // The operator is told, in one error line.
      expect(errors.take(/"payment facilitator unavailable"/)).toHaveLength(1);
      expect(await gw.ledgerState(payer.address.toLowerCase())).toEqual({ balance: 0, locked: 0 });
      expect(await chainBalances(payer)).toEqual(before);
      const [row] = await gw.services.sql`SELECT count(*)::int AS n FROM credits WHERE kind = 'topup'`;
      expect(row!.n).toBe(0);
    },
    60_000,
  );

  test("a deployment without PAY_TO takes no top-ups: 503", async () => {
    const gw = await startGateway({ DEPLOYMENT: "local" });
    closed.push(gw);
    const res = await gw.call("POST", "/v1/topup", { amount: 5 });
    expect(res.status).toBe(503);
    expect(res.body).toEqual({ error: "top-ups are not configured on this deployment" });
  }, 60_000);
});

describe("a failure between settlement and the Postgres write loses nothing", () => {
  test("Postgres refuses the insert: the credit is deferred to the Redis outbox, then the reconciler records it", async () => {
    const gw = await startGateway(chain.gatewayEnv());
    closed.push(gw);
    const payer = await chain.newPayer();
    const wallet = payer.address.toLowerCase();
    const sql = gw.services.sql;
    // A real fault: the table the insert writes to is gone while the payment settles.
    await sql`ALTER TABLE credits RENAME TO credits_away`;
    let res: Response;
    try {
      res = await v1Fetch(gw.fetch, chain, payer)(...args(2));
    } finally {
      await sql`ALTER TABLE credits_away RENAME TO credits`;
    }
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ balance_usdc: 2_000_000, credited_usdc: 2_000_000 });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 2_000_000, locked: 0 });
    expect(Object.keys(await gw.services.redis.hgetall(gw.services.ledger.names.creditOutbox))).toHaveLength(1);
    expect(errors.take(/"credit not recorded in Postgres after retries/)).toHaveLength(1);
    expect(await sql`SELECT 1 FROM credits WHERE wallet = ${wallet}`).toHaveLength(0);

    // The flusher's idle hook; called directly instead of waiting for it.
    expect(await gw.services.credits.reapplyPending()).toBe(1);
    const rows = await sql<{ amount_usdc: number; kind: string; applied: boolean; tx_hash: string }[]>`
      SELECT amount_usdc, kind, applied_at IS NOT NULL AS applied, tx_hash FROM credits WHERE wallet = ${wallet}`;
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ amount_usdc: 2_000_000, kind: "topup", applied: true });
    expect(rows[0]!.tx_hash).toMatch(/^0x[0-9a-f]{64}$/);
    expect(await gw.services.redis.hgetall(gw.services.ledger.names.creditOutbox)).toEqual({});
    // Recorded once, credited once.
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 2_000_000, locked: 0 });
    expect(await gw.services.credits.reapplyPending()).toBe(0);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 2_000_000, locked: 0 });
  }, 60_000);
});
