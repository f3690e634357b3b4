/**
 * The top-up routes' live answers against the OpenAPI document, on a private dev chain: 400 before any 402, the
 * 402 terms with PAYMENT-REQUIRED, a paid 200 with its receipts, a refused encoding (plain error), the history.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { startChain, type DevChain } from "./helpers/chain.ts";
import { BASE, startGateway, type TestGateway } from "./helpers/gateway.ts";
import { type Conformance, conformance } from "./helpers/openapi.ts";
import { v1Fetch } from "./helpers/x402.ts";

let chain: DevChain;
let gw: TestGateway;
let conforms: Conformance["conforms"];
beforeAll(async () => {
  chain = await startChain();
  gw = await startGateway(chain.gatewayEnv());
  ({ conforms } = await conformance(gw));
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await chain?.stop();
});

const request = (amount: number, headers: Record<string, string> = {}): [string, RequestInit] => [
  `${BASE}/v1/topup`,
  { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify({ amount }) },
];

test("400, 402 with PAYMENT-REQUIRED, 400 plain error, paid 200 with receipts, then the history", async () => {
  await conforms("POST", "/v1/topup", await gw.fetch(...request(0.5)));
  const offer = await gw.fetch(...request(5));
  expect(offer.status).toBe(402);
  expect(offer.headers.has("payment-required")).toBe(true);
  await conforms("POST", "/v1/topup", offer);
  await conforms("POST", "/v1/topup", await gw.fetch(...request(5, { "x-payment": "not a payment" })));

  const payer = await chain.newPayer();
  const paid = await v1Fetch(gw.fetch, chain, payer)(...request(5));
  expect(paid.status).toBe(200);
  expect(paid.headers.has("x-payment-response") && paid.headers.has("payment-response")).toBe(true);
  expect(await conforms("POST", "/v1/topup", paid)).toEqual({ balance_usdc: 5_000_000, credited_usdc: 5_000_000 });

  const { message, signature } = await gw.signIn(payer);
  const wallet = payer.address.toLowerCase();
  const history = await conforms(
    "GET",
    `/v1/topups/${wallet}`,
    await gw.fetch(`${BASE}/v1/topups/${wallet}?${new URLSearchParams({ message, signature })}`),
  );
  expect(history.topups).toHaveLength(1);
}, 60_000);
