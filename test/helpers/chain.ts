/**
 * A local EVM chain for tests and the dev command: anvil from the npm package `@foundry-rs/anvil` (its binary
 * ships inside the platform package, so nothing is downloaded), the test token (contracts/TestToken.sol,
 * compiled by scripts/build-contracts.ts) deployed as a USDC and a USDT stand-in, Multicall3, Permit2 and x402's
 * exact Permit2 proxy at their canonical addresses (./permit2.ts), a relayer with gas money and a fresh PAY_TO.
 */
import { type Subprocess, spawn } from "bun";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import {
  type Abi,
  type Address,
  createPublicClient,
  createWalletClient,
  defineChain,
  getAddress,
  type Hex,
  http,
  keccak256,
  parseEther,
  publicActions,
  stringToHex,
} from "viem";
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from "viem/accounts";
import { installPermit2 } from "./permit2.ts";

/** Base Sepolia's chain id: x402 v1 clients sign only for chains on their fixed list, so the dev chain uses it. */
export const DEV_CHAIN_ID = 84532;
export const MULTICALL3 = "0xcA11bde05977b3631167028862bE2a173976CA11" as const;
const ROOT = resolve(import.meta.dir, "../..");
const ARTIFACT = join(ROOT, "contracts/out/TestToken.json");

const PLATFORM: Record<string, string> = {
  "linux-x64": "linux-amd64",
  "linux-arm64": "linux-arm64",
  "darwin-x64": "darwin-amd64",
  "darwin-arm64": "darwin-arm64",
};

/** The anvil binary of this platform, from the optional dependency of `@foundry-rs/anvil`. */
export function anvilBinary(): string {
  const suffix = PLATFORM[`${process.platform}-${process.arch}`];
  if (!suffix) throw new Error(`anvil: no npm build for ${process.platform}-${process.arch}`);
  const pkg = createRequire(join(ROOT, "package.json")).resolve(`@foundry-rs/anvil-${suffix}/package.json`);
  return join(dirname(pkg), "bin", "anvil");
}

export interface TokenInfo {
  symbol: string;
  address: Address;
  decimals: number;
  eip712Name: string;
  eip712Version: string;
  transfer: "eip3009" | "permit";
}

export interface DevChain {
  rpcUrl: string;
  chainId: number;
  usdc: TokenInfo;
  usdt: TokenInfo;
  relayerKey: Hex;
  relayer: Address;
  payTo: Address;
  /** ASSETS_FILE content for the gateway. */
  assetsFile: string;
  chain: ReturnType<typeof defineChain>;
  /** Gateway environment for this chain with the in-process facilitator. */
  gatewayEnv(): Record<string, string>;
  /** Mints `atomic` units of a token to an address. */
  mint(token: Address, to: Address, atomic: bigint): Promise<void>;
  balanceOf(token: Address, who: Address): Promise<bigint>;
  /** A fresh payer holding `usd` of both tokens (no ETH: paying is gasless). */
  newPayer(usd?: number): Promise<PrivateKeyAccount>;
  rpc(method: string, params?: unknown[]): Promise<unknown>;
  stop(): Promise<void>;
}

export const erc20Abi = [
  {
    type: "function",
    name: "balanceOf",
    stateMutability: "view",
    inputs: [{ name: "a", type: "address" }],
    outputs: [{ type: "uint256" }],
  },
  { type: "function", name: "nonces", stateMutability: "view", inputs: [{ name: "a", type: "address" }], outputs: [{ type: "uint256" }] },
  {
    type: "function",
    name: "allowance",
    stateMutability: "view",
    inputs: [
      { name: "o", type: "address" },
      { name: "s", type: "address" },
    ],
    outputs: [{ type: "uint256" }],
  },
  {
    type: "function",
    name: "mint",
    stateMutability: "nonpayable",
    inputs: [
      { name: "to", type: "address" },
      { name: "v", type: "uint256" },
    ],
    outputs: [],
  },
] as const;

/** Multicall3's creation code as viem ships it (viem deploys it for its own "deployless" reads). */
function multicall3Bytecode(): Hex {
  const viemDir = dirname(createRequire(join(ROOT, "package.json")).resolve("viem/package.json"));
  const m = /multicall3Bytecode = '(0x[0-9a-f]+)'/.exec(readFileSync(join(viemDir, "_esm/constants/contracts.js"), "utf8"));
  if (!m) throw new Error("Multicall3 bytecode not found in viem");
  return m[1] as Hex;
}

function artifact(): { abi: Abi; bytecode: Hex } {
  if (!existsSync(ARTIFACT))
    throw new Error("contracts/out/TestToken.json is missing: run `bun scripts/build-contracts.ts` (scripts/setup.sh does)");
  return JSON.parse(readFileSync(ARTIFACT, "utf8"));
}

async function startAnvil(chainId: number, port: number): Promise<{ proc: Subprocess; url: string }> {
  const proc = spawn([anvilBinary(), "--port", String(port), "--host", "127.0.0.1", "--chain-id", String(chainId), "--accounts", "1"], {
    stdout: "pipe",
    stderr: "pipe",
  });
  const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  const dec = new TextDecoder();
  let seen = "";
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const { value, done } = await reader.read();
    if (done) break;
    seen += dec.decode(value);
    const m = /Listening on ([\d.]+:\d+)/.exec(seen);
    if (m) {
      // Keep draining stdout so anvil never blocks on a full pipe.
      void (async () => {
        while (!(await reader.read()).done);
      })().catch(() => {});
      return { proc, url: `http://${m[1]}` };
    }
  }
  proc.kill();
  throw new Error(`anvil did not start: ${seen.slice(-500)}`);
}

/**
 * A private key derived from a seed and a role: the dev chain's accounts are the same on every start, so its tokens
 * (the deployer's first two contracts) keep their addresses and a browser wallet keeps its imported payer.
 */
export function seededKey(seed: string, role: string): Hex {
  return keccak256(stringToHex(`${seed}:${role}`));
}

/**
 * Starts anvil and deploys the tokens. `usdtDecimals` lets tests prove amounts follow the asset table. With a
 * `seed`, the deployer, relayer and PAY_TO are derived from it (seededKey), so every start deploys the same
 * addresses; without, they are fresh.
 */
export async function startChain(
  opts: { port?: number; chainId?: number; usdtDecimals?: number; dir?: string; seed?: string } = {},
): Promise<DevChain> {
  const chainId = opts.chainId ?? DEV_CHAIN_ID;
  const { proc, url } = await startAnvil(chainId, opts.port ?? 0);
  const chain = defineChain({
    id: chainId,
    name: "Local dev chain",
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [url] } },
    contracts: { multicall3: { address: MULTICALL3 } },
  });
  const pub = createPublicClient({ chain, transport: http(url) });
  const rpc = (method: string, params: unknown[] = []) => pub.request({ method: method as never, params: params as never });

  // Multicall3 at its canonical address (x402's facilitator reads through it): eth_call of the creation code
  // returns the runtime code, which anvil_setCode installs there.
  const runtime = (await pub.call({ data: multicall3Bytecode() })).data!;
  await rpc("anvil_setCode", [MULTICALL3, runtime]);

  const key = (role: string) => (opts.seed ? seededKey(opts.seed, role) : generatePrivateKey());
  const deployer = privateKeyToAccount(key("deployer"));
  const relayerKey = key("relayer");
  const relayer = privateKeyToAccount(relayerKey).address;
  const payTo = privateKeyToAccount(key("payTo")).address;
  for (const a of [deployer.address, relayer]) await rpc("anvil_setBalance", [a, `0x${parseEther("1000").toString(16)}`]);
  const wallet = createWalletClient({ account: deployer, chain, transport: http(url) }).extend(publicActions);
  await installPermit2(pub, wallet, chainId);

  const { abi, bytecode } = artifact();
  const deploy = async (t: Omit<TokenInfo, "address">): Promise<TokenInfo> => {
    const hash = await wallet.deployContract({ abi, bytecode, args: [t.eip712Name, t.symbol, t.eip712Version, t.decimals] });
    const receipt = await wallet.waitForTransactionReceipt({ hash });
    return { ...t, address: getAddress(receipt.contractAddress!) };
  };
  const usdc = await deploy({ symbol: "USDC", decimals: 6, eip712Name: "USD Coin", eip712Version: "2", transfer: "eip3009" });
  const usdt = await deploy({
    symbol: "USDT",
    decimals: opts.usdtDecimals ?? 6,
    eip712Name: "Tether USD",
    eip712Version: "1",
    transfer: "permit",
  });

  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), "gw-chain-"));
  const assetsFile = join(dir, "assets.json");
  writeFileSync(assetsFile, JSON.stringify([usdc, usdt], null, 2));

  const mint = async (token: Address, to: Address, atomic: bigint) => {
    const hash = await wallet.writeContract({ address: token, abi: erc20Abi, functionName: "mint", args: [to, atomic] });
    await wallet.waitForTransactionReceipt({ hash });
  };
  const balanceOf = (token: Address, who: Address) =>
    pub.readContract({ address: token, abi: erc20Abi, functionName: "balanceOf", args: [who] });

  return {
    rpcUrl: url,
    chainId,
    usdc,
    usdt,
    relayerKey,
    relayer,
    payTo,
    assetsFile,
    chain,
    gatewayEnv: () => ({
      DEPLOYMENT: "local",
      CHAIN_ID: String(chainId),
      PAY_TO: payTo,
      FACILITATOR: "local",
      RPC_URL: url,
      RELAYER_PRIVATE_KEY: relayerKey,
      ASSETS_FILE: assetsFile,
    }),
    mint,
    balanceOf,
    async newPayer(usd = 100) {
      const payer = privateKeyToAccount(generatePrivateKey());
      await mint(usdc.address, payer.address, BigInt(usd) * 10n ** BigInt(usdc.decimals));
      await mint(usdt.address, payer.address, BigInt(usd) * 10n ** BigInt(usdt.decimals));
      return payer;
    },
    rpc,
    async stop() {
      proc.kill();
      await proc.exited;
    },
  };
}
