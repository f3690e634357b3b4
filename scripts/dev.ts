/**
 * The local top-up playground: a dev chain (anvil from npm, chain id 84532), the test token deployed as USDC
 * (EIP-3009) and USDT (EIP-2612), Permit2 and x402's Permit2 proxy, a funded payer, and the gateway on it with
 * the in-process facilitator.
 * Run through `bash scripts/dev.sh`; then `bun scripts/topup.ts 5` pays a real top-up. Ctrl-C stops everything.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { startChain } from "../test/helpers/chain.ts";

const root = resolve(import.meta.dir, "..");
const dataDir = resolve(process.env.DATA_DIR ?? join(root, "data/dev"));
const port = Number(process.env.PORT ?? 8080);
const rpcPort = Number(process.env.DEV_CHAIN_PORT ?? 8545);
mkdirSync(dataDir, { recursive: true });

const chain = await startChain({ port: rpcPort, dir: dataDir });
const payerKey = generatePrivateKey();
const payer = privateKeyToAccount(payerKey);
await chain.mint(chain.usdc.address, payer.address, 1_000n * 10n ** BigInt(chain.usdc.decimals));
await chain.mint(chain.usdt.address, payer.address, 1_000n * 10n ** BigInt(chain.usdt.decimals));

const info = {
  gateway: `http://localhost:${port}`,
  rpcUrl: chain.rpcUrl,
  chainId: chain.chainId,
  usdc: chain.usdc,
  usdt: chain.usdt,
  payTo: chain.payTo,
  payerKey,
};
writeFileSync(join(dataDir, "devchain.json"), JSON.stringify(info, null, 2));

const gateway = Bun.spawn(["bun", join(root, "src/main.ts"), "serve"], {
  cwd: root,
  env: { ...process.env, ...chain.gatewayEnv(), DATA_DIR: dataDir, PORT: String(port) },
  stdout: "inherit",
  stderr: "inherit",
});

console.error(`
dev chain     ${chain.rpcUrl} (chain id ${chain.chainId}; Multicall3, Permit2, x402's Permit2 proxy at their canonical addresses)
USDC          ${chain.usdc.address} (EIP-3009, ${chain.usdc.decimals} decimals)
USDT          ${chain.usdt.address} (EIP-2612 permit, ${chain.usdt.decimals} decimals)
PAY_TO        ${chain.payTo}
payer         ${payer.address} holds 1000 USDC and 1000 USDT (key in ${join(dataDir, "devchain.json")})
gateway       http://localhost:${port}  (data in ${dataDir})
dashboard     http://localhost:${port}/  with a browser wallet on chain id ${chain.chainId}, RPC ${chain.rpcUrl},
              holding the payer's key (or any account: top-ups need its USDC/USDT, signing in needs nothing)

top up:       bun scripts/topup.ts 5                 # x402-fetch (v1), USDC
              bun scripts/topup.ts 5 --v2            # @x402/fetch (v2), USDC
              bun scripts/topup.ts 5 --v2 --usdt     # @x402/fetch (v2), USDT by permit
              bun scripts/topup.ts 5 --v2 --usdt --permit2   # stock @x402/evm (v2), USDT through Permit2
`);

let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  gateway.kill("SIGTERM");
  await gateway.exited;
  await chain.stop();
  process.exit(0);
};
process.on("SIGINT", () => void stop());
process.on("SIGTERM", () => void stop());
await gateway.exited;
await stop();
