/**
 * A real top-up against the gateway that `bash scripts/dev.sh` runs, paid by its dev payer with the x402 client
 * libraries set up as docs/payments.md "Pay from your own code" shows: `bun scripts/topup.ts <usd> [--v2] [--usdt [--permit2]]`.
 * `--v2 --usdt` pays by the gateway's permit path; `--permit2` pays USDT as a stock `@x402/evm` client does,
 * through Permit2. Prints the client settings it used, the answer, the settlement transaction and the new balance.
 */
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { toClientEvmSigner } from "@x402/evm";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { wrapFetchWithPayment as wrapV2, x402Client } from "@x402/fetch";
import { createPublicClient, createWalletClient, defineChain, type Hex, http, parseUnits } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { wrapFetchWithPayment as wrapV1 } from "x402-fetch";
import { PermitAwareExactEvmScheme } from "../src/payments/permitClient.ts";

const args = process.argv.slice(2);
const amount = args.find((a) => !a.startsWith("--")) ?? "5";
const v2 = args.includes("--v2") || args.includes("--permit2");
const permit2 = args.includes("--permit2");
const symbol = args.includes("--usdt") || permit2 ? "USDT" : "USDC";
if (symbol === "USDT" && !v2) {
  console.error("USDT is paid by permit, which only the v2 client (with the gateway's scheme) makes: add --v2");
  process.exit(2);
}
const dataDir = resolve(process.env.DATA_DIR ?? join(import.meta.dir, "../data/dev"));
const infoFile = join(dataDir, "devchain.json");
if (!existsSync(infoFile)) {
  console.error(`no dev chain at ${infoFile}: start \`bash scripts/dev.sh\` first (with the same DATA_DIR)`);
  process.exit(1);
}
const info = JSON.parse(readFileSync(infoFile, "utf8"));
const token: { address: Hex; decimals: number } = symbol === "USDT" ? info.usdt : info.usdc;
const payer = privateKeyToAccount(info.payerKey as Hex);
const chain = defineChain({
  id: info.chainId,
  name: "Local dev chain",
  nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
  rpcUrls: { default: { http: [info.rpcUrl] } },
});
// The most one payment may take, in the token's smallest unit: exactly the amount asked for.
const cap = parseUnits(amount, token.decimals);
const network = `eip155:${info.chainId}` as const;

let pay: typeof fetch;
let settings: string;
if (!v2) {
  // The wallet client's chain id (84532) picks the x402 v1 network ("base-sepolia"); signing needs no RPC call.
  const wallet = createWalletClient({ account: payer, chain, transport: http(info.rpcUrl) });
  pay = wrapV1(fetch, wallet as never, cap) as typeof fetch;
  settings = `x402-fetch (v1): wrapFetchWithPayment(fetch, wallet on chain ${info.chainId}, maxValue ${cap}n)  (default 100000n = 0.1 USDC, below the 1 USD minimum)`;
} else {
  const client = new x402Client();
  if (symbol === "USDC") registerExactEvmScheme(client, { signer: payer });
  // Permit2: x402's own scheme, unmodified; it reads the payer's Permit2 allowance, hence the RPC URL.
  else if (permit2) registerExactEvmScheme(client, { signer: payer, schemeOptions: { rpcUrl: info.rpcUrl } });
  else {
    // Permit: the payer's token nonce is read from the chain, so this signer needs a public client.
    const pub = createPublicClient({ chain, transport: http(info.rpcUrl) });
    client.register(network, new PermitAwareExactEvmScheme(toClientEvmSigner(payer, pub)));
  }
  // The dev chain's tokens are not x402's built-in assets: they are refused until allowed, here with their own cap.
  const allowed = [{ network, asset: token.address, maxAmountPerPayment: String(cap) }];
  client.setSpendControls({ allowedAssets: allowed });
  // The offer lists USDT twice (Permit2 first, then the gateway's permit): keep the one this run pays with.
  const method = (r: { extra?: Record<string, unknown> }) => r.extra?.assetTransferMethod;
  client.registerPolicy((_v, reqs) =>
    reqs.filter(
      (r) => r.asset.toLowerCase() === token.address.toLowerCase() && (symbol === "USDC" || (method(r) === "permit2") === permit2),
    ),
  );
  pay = wrapV2(fetch, client) as typeof fetch;
  settings =
    `@x402/fetch (v2): ${symbol === "USDC" ? "registerExactEvmScheme(client, { signer })" : permit2 ? `registerExactEvmScheme(client, { signer, schemeOptions: { rpcUrl: "${info.rpcUrl}" } })` : `client.register("${network}", new PermitAwareExactEvmScheme(signer))`}; ` +
    `setSpendControls({ allowedAssets: ${JSON.stringify(allowed)} })  (default: x402's own assets only, $1 a payment)`;
}
console.log("client", settings);
console.log("payer", payer.address, "pays", amount, symbol, "at", token.address);

const res = await pay(`${info.gateway}/v1/topup`, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ amount: Number(amount) }),
});
const receipt = res.headers.get("x-payment-response") ?? res.headers.get("payment-response");
console.log(res.status, await res.text());
if (receipt) console.log("settlement", JSON.parse(Buffer.from(receipt, "base64").toString("utf8")));
const balance = await fetch(`${info.gateway}/v1/balance/${payer.address}`).then((r) => r.json());
console.log("balance (µUSDC)", balance);
