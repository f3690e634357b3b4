/**
 * A gateway killed (SIGKILL) between serving an `upto` call and settling it on chain loses nothing: the call was
 * charged, its authorization's credit settled down to the charge, and the settlement it owes is in Postgres
 * (upto_settles), shown by `admin audit`; the repair job on any gateway of the same database makes it, once, for
 * exactly the charge. A real gateway child process; its chain RPC passes through a proxy that kills it the moment it
 * sends the settlement transaction, before the chain has it.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { x402Client, wrapFetchWithPayment } from "@x402/fetch";
import { toClientEvmSigner } from "@x402/evm";
import { UptoEvmScheme } from "@x402/evm/upto/client";
import { createPublicClient, http } from "viem";
import { auditLedger } from "../src/audit/audit.ts";
import { formatAudit } from "../src/audit/report.ts";
import { startChain, type DevChain } from "./helpers/chain.ts";
import { freePort, startChildGateway, type ChildGateway } from "./helpers/child.ts";
import { expectedCharge, startGateway, type TestGateway } from "./helpers/gateway.ts";
import { usageFor } from "./helpers/openaiStandin.ts";

let chain: DevChain;
let gw: TestGateway;
let child: ChildGateway | undefined;
let rpc: ReturnType<typeof Bun.serve>;
let sent = 0;

beforeAll(async () => {
  chain = await startChain();
  // The child's RPC: everything passes to the chain, but a transaction kills the child instead of reaching it.
  rpc = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      const text = await req.text();
      if (text.includes('"eth_sendRawTransaction"')) {
        sent++;
        child?.proc.kill("SIGKILL");
        await child?.proc.exited;
        return new Response("killed", { status: 503 });
      }
      return fetch(chain.rpcUrl, { method: "POST", headers: { "content-type": "application/json" }, body: text });
    },
  });
  gw = await startGateway(chain.gatewayEnv(), { redisPort: freePort() });
}, 60_000);

afterAll(async () => {
  child?.proc.kill("SIGKILL");
  await gw?.close();
  await rpc?.stop(true);
  await chain?.stop();
});

const messages = [{ role: "user" as const, content: "Say hello." }];
const usage = usageFor(messages.length);
const charge = expectedCharge(usage.prompt_tokens, usage.completion_tokens);

test("SIGKILL between serving and settling: the settlement is kept, shown by admin audit, and made once by the repair job", async () => {
  child = await startChildGateway({ ...gw.sharedEnv(), RPC_URL: `http://127.0.0.1:${rpc.port}` });
  const payer = await chain.newPayer(5);
  const wallet = payer.address.toLowerCase();
  const before = {
    payer: await chain.balanceOf(chain.usdc.address, payer.address),
    payTo: await chain.balanceOf(chain.usdc.address, chain.payTo),
  };

  const network = `eip155:${chain.chainId}` as const;
  const client = new x402Client().register(
    network,
    new UptoEvmScheme(toClientEvmSigner(payer, createPublicClient({ chain: chain.chain, transport: http(chain.rpcUrl) })), {
      rpcUrl: chain.rpcUrl,
    }),
  );
  client.setSpendControls({ allowedAssets: [{ network, asset: chain.usdc.address }] });
  const call = wrapFetchWithPayment(fetch, client)(`${child.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "standin/echo", messages }),
  });
  await expect(call).rejects.toThrow(); // the gateway died while settling
  expect(sent).toBe(1);

  // Served and charged; nothing moved on chain; the settlement owed is in Postgres, the ledger agrees with itself.
  expect(await chain.balanceOf(chain.usdc.address, payer.address)).toBe(before.payer);
  const rows = () =>
    gw.services.sql<{ state: string; charge_usdc: number | null; tx_hash: string | null }[]>`
      SELECT state, charge_usdc, tx_hash FROM upto_settles WHERE payer = ${wallet}`;
  expect([...(await rows())]).toEqual([{ state: "charged", charge_usdc: charge, tx_hash: null }]);
  const s = gw.services;
  await s.flusher.drain();
  const audit = await auditLedger({ redis: s.redis, scripts: s.scripts, sql: s.sql, names: s.ledger.names });
  expect(audit.differences).toEqual([]);
  expect(audit.inFlight.find((f) => f.label === "upto settlements to make")).toMatchObject({ count: 1, usdc: charge });
  expect(formatAudit(audit)).toContain("upto settlements to make");

  // The repair job (here without its minute's wait for the dead request) settles exactly the charge, once.
  expect(await s.keyless.upto.recover(0)).toBe(1);
  expect(before.payer - (await chain.balanceOf(chain.usdc.address, payer.address))).toBe(BigInt(charge));
  expect((await chain.balanceOf(chain.usdc.address, chain.payTo)) - before.payTo).toBe(BigInt(charge));
  const [row] = await rows();
  expect(row).toMatchObject({ state: "settled", charge_usdc: charge });
  expect(row!.tx_hash).toMatch(/^0x[0-9a-f]{64}$/);
  expect(await s.keyless.upto.recover(0)).toBe(0);
  expect(before.payer - (await chain.balanceOf(chain.usdc.address, payer.address))).toBe(BigInt(charge));
  expect(await gw.ledgerState(`upto:${wallet}`)).toEqual({ balance: 0, locked: 0 });
  const after = await auditLedger({ redis: s.redis, scripts: s.scripts, sql: s.sql, names: s.ledger.names });
  expect(after.differences).toEqual([]);
  expect(after.inFlight.find((f) => f.label === "upto settlements to make")).toMatchObject({ count: 0 });
}, 90_000);
