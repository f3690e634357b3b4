/**
 * The local playground: a dev chain (anvil from npm, chain id 84532), the test token deployed as USDC (EIP-3009)
 * and USDT (EIP-2612), Permit2 and x402's Permit2 proxy, a funded payer, the echo model (scripts/echo-model.ts),
 * and the gateway on the local catalog (config/models.local.json) with the in-process facilitator. Run through
 * `bash scripts/dev.sh`; then `bun scripts/topup.ts 5` pays a real top-up and the dashboard can chat. Ctrl-C stops
 * everything.
 *
 * Ports: PORT (gateway, 8080), ECHO_PORT (echo model, 8081), DEV_CHAIN_PORT (anvil, 8545). The chain's accounts
 * come from a fixed seed, so the token addresses, PAY_TO and the payer key are the same on every start.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { privateKeyToAccount } from "viem/accounts";
import { seededKey, startChain } from "../test/helpers/chain.ts";
import { startEchoModel } from "./echo-model.ts";

/** Not a secret: every dev chain derives the same accounts from it (like anvil's well-known mnemonic). */
const DEV_SEED = "llm-credit-gateway dev chain";

const root = resolve(import.meta.dir, "..");
const dataDir = resolve(process.env.DATA_DIR ?? join(root, "data/dev"));
const port = Number(process.env.PORT || 8080);
const echoPort = Number(process.env.ECHO_PORT || 8081);
const rpcPort = Number(process.env.DEV_CHAIN_PORT || 8545);
mkdirSync(dataDir, { recursive: true });

const echo = startEchoModel({ port: echoPort });
const chain = await startChain({ port: rpcPort, dir: dataDir, seed: DEV_SEED }).catch((e) => {
  void echo.stop();
  console.error(`dev chain did not start on port ${rpcPort} (DEV_CHAIN_PORT): ${e instanceof Error ? e.message : e}`);
  process.exit(1);
});
const payerKey = seededKey(DEV_SEED, "payer");
const payer = privateKeyToAccount(payerKey);
await chain.mint(chain.usdc.address, payer.address, 1_000n * 10n ** BigInt(chain.usdc.decimals));
await chain.mint(chain.usdt.address, payer.address, 1_000n * 10n ** BigInt(chain.usdt.decimals));

const gatewayUrl = `http://localhost:${port}`;
const info = {
  gateway: gatewayUrl,
  rpcUrl: chain.rpcUrl,
  chainId: chain.chainId,
  usdc: chain.usdc,
  usdt: chain.usdt,
  payTo: chain.payTo,
  payerKey,
  echoModel: echo.url,
};
writeFileSync(join(dataDir, "devchain.json"), JSON.stringify(info, null, 2));

// The local catalog's echo provider is `http://127.0.0.1:${ECHO_PORT:-8081}/v1`: the same variable moves both.
const modelsFile = process.env.MODELS_FILE || join(root, "config/models.local.json");
const gateway = Bun.spawn(["bun", join(root, "src/main.ts"), "serve"], {
  cwd: root,
  env: {
    ...process.env,
    ...chain.gatewayEnv(),
    DATA_DIR: dataDir,
    PORT: String(port),
    ECHO_PORT: String(echoPort),
    MODELS_FILE: modelsFile,
  },
  stdout: "inherit",
  stderr: "inherit",
});

console.error(`
dev chain     ${chain.rpcUrl} (chain id ${chain.chainId}; Multicall3, Permit2, x402's Permit2 proxy at their canonical addresses)
USDC          ${chain.usdc.address} (EIP-3009, ${chain.usdc.decimals} decimals)
USDT          ${chain.usdt.address} (EIP-2612 permit, ${chain.usdt.decimals} decimals)
PAY_TO        ${chain.payTo}
payer         ${payer.address} holds 1000 USDC and 1000 USDT (key in ${join(dataDir, "devchain.json")})
              the same addresses and key on every start (fixed seed); balances start over with the chain
models        ${modelsFile}; echo model on ${echo.url}
gateway       ${gatewayUrl}  (data in ${dataDir})
dashboard     ${gatewayUrl}/  with a browser wallet on chain id ${chain.chainId}, RPC ${chain.rpcUrl},
              holding the payer's key (or any account: top-ups need its USDC/USDT, signing in needs nothing)

top up:       bun scripts/topup.ts 5                 # x402-fetch (v1), USDC
              bun scripts/topup.ts 5 --v2            # @x402/fetch (v2), USDC
              bun scripts/topup.ts 5 --v2 --usdt     # @x402/fetch (v2), USDT by permit
              bun scripts/topup.ts 5 --permit2       # stock @x402/evm (v2), USDT through Permit2
your own code (docs/payments.md "Pay from your own code"), in another terminal:
              export PORT=${port} PRIVATE_KEY=${payerKey} USDC=${chain.usdc.address}
`);

let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  gateway.kill("SIGTERM");
  const code = await gateway.exited;
  await chain.stop();
  await echo.stop();
  process.exit(code);
};
process.on("SIGINT", () => void stop());
process.on("SIGTERM", () => void stop());
await gateway.exited;
await stop();
