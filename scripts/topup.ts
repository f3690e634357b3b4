/**
 * A real top-up against the gateway that `bash scripts/dev.sh` runs, paid by its funded dev payer with the x402
 * client libraries: `bun scripts/topup.ts <usd> [--v2] [--usdt [--permit2]]`. `--v2 --usdt` pays by the gateway's
 * permit path; `--permit2` pays USDT as a stock `@x402/evm` client does, through Permit2. Prints the answer, the
 * settlement transaction and the new balance.
 */
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { defineChain, type Hex } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import type { DevChain } from "../test/helpers/chain.ts";
import { v1Fetch, v2Fetch, v2StockUsdtFetch } from "../test/helpers/x402.ts";

const args = process.argv.slice(2);
const amount = Number(args.find((a) => !a.startsWith("--")) ?? "5");
const dataDir = resolve(process.env.DATA_DIR ?? join(import.meta.dir, "../data/dev"));
const infoFile = join(dataDir, "devchain.json");
if (!existsSync(infoFile)) {
  console.error(`no dev chain at ${infoFile}: start \`bash scripts/dev.sh\` first (with the same DATA_DIR)`);
  process.exit(1);
}
const info = JSON.parse(readFileSync(infoFile, "utf8"));
const payer = privateKeyToAccount(info.payerKey as Hex);
const chain = {
  ...info,
  chain: defineChain({
    id: info.chainId,
    name: "Local dev chain",
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [info.rpcUrl] } },
  }),
} as DevChain;

const pay = args.includes("--permit2")
  ? v2StockUsdtFetch(fetch, chain, payer)
  : args.includes("--v2")
    ? v2Fetch(fetch, chain, payer, args.includes("--usdt") ? "USDT" : "USDC")
    : v1Fetch(fetch, chain, payer);
const res = await pay(`${info.gateway}/v1/topup`, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ amount }),
});
const receipt = res.headers.get("x-payment-response") ?? res.headers.get("payment-response");
console.log(res.status, await res.text());
if (receipt) console.log("settlement", JSON.parse(Buffer.from(receipt, "base64").toString("utf8")));
const balance = await fetch(`${info.gateway}/v1/balance/${payer.address}`).then((r) => r.json());
console.log("balance", balance);
