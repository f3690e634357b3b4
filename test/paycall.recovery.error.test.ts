/**
 * A gateway killed (SIGKILL) between a paid call's settlement and its answer loses no money: the check it opened
 * before settling lets the recovery job find the transfer on chain and credit the key's owner, once; the payment
 * replayed afterwards credits nothing. A real gateway child process, x402's reference facilitator over HTTP.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { auditLedger } from "../src/audit/audit.ts";
import { startChain, type DevChain } from "./helpers/chain.ts";
import { freePort, startChildGateway, type ChildGateway } from "./helpers/child.ts";
import { startFacilitator, type FacilitatorServer } from "./helpers/facilitator.ts";
import { startGateway, type TestGateway } from "./helpers/gateway.ts";
import { v2Fetch } from "./helpers/x402.ts";

let chain: DevChain;
let gw: TestGateway;
let facilitator: FacilitatorServer;
let child: ChildGateway | undefined;

beforeAll(async () => {
  chain = await startChain();
  // The facilitator kills the gateway child the moment its settlement is on chain, before answering /settle.
  facilitator = await startFacilitator(chain, {
    onSettle: async () => {
      child?.proc.kill("SIGKILL");
      await child?.proc.exited;
    },
  });
  gw = await startGateway({ ...chain.gatewayEnv(), FACILITATOR: "http", FACILITATOR_URL: facilitator.url }, { redisPort: freePort() });
}, 60_000);

afterAll(async () => {
  child?.proc.kill("SIGKILL");
  await gw?.close();
  facilitator?.stop();
  await chain?.stop();
});

test("SIGKILL between settlement and answer: recovery credits the key's owner once; a replay credits nothing", async () => {
  child = await startChildGateway(gw.sharedEnv());
  const owner = await gw.newWallet(0);
  const payer = await chain.newPayer();
  const before = {
    payer: await chain.balanceOf(chain.usdc.address, payer.address),
    payTo: await chain.balanceOf(chain.usdc.address, chain.payTo),
  };

  let header: string | undefined;
  const toChild = (async (input: string | URL | Request, init?: RequestInit) => {
    const req = new Request(input, init);
    header ??= req.headers.get("payment-signature") ?? undefined;
    return fetch(req);
  }) as typeof fetch;
  const call = v2Fetch(
    toChild,
    chain,
    payer,
  )(`${child.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${owner.key}` },
    body: JSON.stringify({ model: "standin/echo", messages: [{ role: "user", content: "Say hello." }] }),
  });
  await expect(call).rejects.toThrow(); // the gateway died mid-request
  expect(header).toBeDefined();

  // The money moved; the gateway died before crediting it.
  const settled = await facilitator.settlements.at(-1)!;
  expect(settled.success).toBe(true);
  expect(before.payer - (await chain.balanceOf(chain.usdc.address, payer.address))).toBe(1_000_000n);
  expect((await chain.balanceOf(chain.usdc.address, chain.payTo)) - before.payTo).toBe(1_000_000n);
  expect(await gw.ledgerState(owner.wallet)).toEqual({ balance: 0, locked: 0 });
  const checks = () => gw.services.sql<{ state: string; wallet: string | null; payer: string }[]>`
    SELECT state, wallet, payer FROM payment_checks WHERE payer = ${payer.address.toLowerCase()}`;
  expect([...(await checks())]).toEqual([{ state: "pending", wallet: owner.wallet, payer: payer.address.toLowerCase() }]);

  // The recovery job (any gateway on this database) reads the chain and credits the key's owner, not the payer.
  expect(await gw.services.topup.recovery.checkPending()).toBe(1);
  const tx = settled.transaction.toLowerCase();
  expect(await gw.ledgerState(owner.wallet)).toEqual({ balance: 1_000_000, locked: 0 });
  expect(await gw.ledgerState(payer.address.toLowerCase())).toEqual({ balance: 0, locked: 0 });
  expect([
    ...(await gw.services.sql`SELECT wallet, payer, amount_usdc, tx_hash FROM credits WHERE kind = 'topup' AND tx_hash = ${tx}`),
  ]).toEqual([{ wallet: owner.wallet, payer: payer.address.toLowerCase(), amount_usdc: 1_000_000, tx_hash: tx }]);
  expect((await checks()).map((c) => c.state)).toEqual(["credited"]);

  // The same payment again, on the surviving gateway: refused, nothing credited twice; the credit pays the call.
  const replay = await gw.call(
    "POST",
    "/v1/chat/completions",
    { model: "standin/echo", messages: [{ role: "user", content: "Say hello." }] },
    { authorization: `Bearer ${owner.key}`, "payment-signature": header! },
  );
  expect([replay.status, replay.body.error]).toEqual([402, "PAYMENT_ALREADY_USED"]);
  expect(await gw.ledgerState(owner.wallet)).toEqual({ balance: 1_000_000, locked: 0 });
  const served = await gw.openai(owner.key).chat.completions.create({ model: "standin/echo", messages: [{ role: "user", content: "Hi" }] });
  expect(served.choices).toHaveLength(1);
  expect(await gw.services.topup.recovery.checkPending()).toBe(0);
  const s = gw.services;
  expect((await auditLedger({ redis: s.redis, scripts: s.scripts, sql: s.sql, names: s.ledger.names })).differences).toEqual([]);
}, 60_000);
