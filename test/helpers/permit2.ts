/**
 * Uniswap's Permit2 and x402's exact Permit2 proxy at their canonical addresses on a local anvil chain, so that
 * `@x402/evm`'s Permit2 flow (USDT for stock x402 clients) runs against the very contracts it expects, offline.
 * Where the bytes come from and why: contracts/vendor/README.md.
 */
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { PERMIT2_ADDRESS, x402ExactPermit2ProxyAddress, x402UptoPermit2ProxyAddress } from "@x402/evm";
import {
  type Address,
  concat,
  encodeAbiParameters,
  getContractAddress,
  type Hex,
  isAddressEqual,
  keccak256,
  pad,
  parseAbi,
  type PublicClient,
  toHex,
  type WalletClient,
} from "viem";

const VENDOR = resolve(import.meta.dir, "../../contracts/vendor");
/** Arachnid's deterministic CREATE2 deployer, which anvil has at this address from block 0. */
export const CREATE2_DEPLOYER = "0x4e59b44847b379578588920cA78FbF26c0B4956C" as const;
/** The salt x402 mined for the exact proxy's vanity address (x402 contracts/evm/script/Deploy.s.sol). */
const EXACT_PROXY_SALT = "0x0000000000000000000000000000000000000000000000003000000007263b0e" as const;
/** Chain id and domain separator Permit2's constructor cached in the vendored runtime code (a forge test run). */
const BUILT_CHAIN_ID = 31337n;
const BUILT_DOMAIN_SEPARATOR = "0xd5a17abc3865df5c1400c0299bd4ce2eefc8114aec5f9d3dded1745783e57b98";

const abi = parseAbi([
  "function DOMAIN_SEPARATOR() view returns (bytes32)",
  "function PERMIT2() view returns (address)",
  "function WITNESS_TYPE_STRING() view returns (string)",
]);
/** The dev chain's upto proxy (contracts/UptoPermit2Proxy.sol, compiled by scripts/build-contracts.ts). */
const UPTO_ARTIFACT = resolve(import.meta.dir, "../../contracts/out/UptoPermit2Proxy.json");
const PUSH32 = "7f";

const hexFile = (name: string) => readFileSync(join(VENDOR, name), "utf8").trim() as Hex;

/** Permit2's EIP-712 domain separator for a chain: what its constructor caches when it runs at the canonical address. */
export function permit2DomainSeparator(chainId: number): Hex {
  return keccak256(
    encodeAbiParameters(
      [{ type: "bytes32" }, { type: "bytes32" }, { type: "uint256" }, { type: "address" }],
      [
        keccak256(toHex("EIP712Domain(string name,uint256 chainId,address verifyingContract)")),
        keccak256(toHex("Permit2")),
        BigInt(chainId),
        PERMIT2_ADDRESS,
      ],
    ),
  );
}

/** Replaces the one PUSH32 of `from` in runtime code with `to`; throws unless there is exactly one. */
function patchPush32(code: string, from: Hex, to: Hex): string {
  const needle = PUSH32 + pad(from, { size: 32 }).slice(2);
  const at = code.indexOf(needle);
  if (at < 0 || code.indexOf(needle, at + 1) >= 0) throw new Error(`Permit2 runtime: expected one PUSH32 ${from}`);
  return code.slice(0, at) + PUSH32 + pad(to, { size: 32 }).slice(2) + code.slice(at + needle.length);
}

/**
 * Permit2's runtime code as a constructor run at the canonical address on `chainId` leaves it: its two
 * immutables (the cached chain id and the domain separator, which hashes chain id and address(this)) rewritten
 * for this chain. Installing the vendored bytes unpatched would keep a separator for another chain and address.
 */
export function permit2Runtime(chainId: number): Hex {
  let code: string = hexFile("Permit2.runtime.hex");
  code = patchPush32(code, toHex(BUILT_CHAIN_ID), toHex(BigInt(chainId)));
  code = patchPush32(code, BUILT_DOMAIN_SEPARATOR, permit2DomainSeparator(chainId));
  return code as Hex;
}

/**
 * Installs Permit2 (anvil_setCode of its patched runtime code, checked through DOMAIN_SEPARATOR()) and deploys
 * x402's exact Permit2 proxy through the CREATE2 deployer with x402's own init code and salt, which lands it at
 * the address `@x402/evm` uses; its constructor runs there, so its PERMIT2 immutable is the real one. `wallet`
 * pays the deployment's gas.
 */
export async function installPermit2(pub: PublicClient, wallet: WalletClient, chainId: number): Promise<void> {
  const rpc = (method: string, params: unknown[]) => pub.request({ method: method as never, params: params as never });
  await rpc("anvil_setCode", [PERMIT2_ADDRESS, permit2Runtime(chainId)]);
  const separator = await pub.readContract({ address: PERMIT2_ADDRESS, abi, functionName: "DOMAIN_SEPARATOR" });
  if (separator !== permit2DomainSeparator(chainId)) throw new Error(`Permit2: DOMAIN_SEPARATOR ${separator} is not this chain's`);

  if (!(await pub.getCode({ address: CREATE2_DEPLOYER }))) throw new Error("anvil has no CREATE2 deployer (started with --no-create2?)");
  const initCode = hexFile("x402ExactPermit2Proxy.initcode.hex");
  const expected = getContractAddress({ opcode: "CREATE2", from: CREATE2_DEPLOYER, salt: EXACT_PROXY_SALT, bytecode: initCode });
  if (!isAddressEqual(expected, x402ExactPermit2ProxyAddress)) throw new Error(`x402 proxy init code lands at ${expected}`);
  const hash = await wallet.sendTransaction({
    account: wallet.account!,
    chain: wallet.chain,
    to: CREATE2_DEPLOYER,
    data: concat([EXACT_PROXY_SALT, initCode]),
  });
  const receipt = await pub.waitForTransactionReceipt({ hash });
  const permit2 = receipt.status === "success" ? await pub.readContract({ address: expected, abi, functionName: "PERMIT2" }) : undefined;
  if (!permit2 || !isAddressEqual(permit2 as Address, PERMIT2_ADDRESS)) throw new Error("x402 exact Permit2 proxy did not deploy");
  await installUptoProxy(pub);
}

/**
 * The `upto` scheme's Permit2 proxy at the address `@x402/evm` signs for (`x402UptoPermit2ProxyAddress`, which its
 * `upto` client names as spender and its facilitator calls). x402's published init code and salt land elsewhere (its
 * deploy script's address and the package's differ), so the dev chain installs contracts/UptoPermit2Proxy.sol, the
 * same interface and rules, there: its runtime code (an eth_call of the creation code returns it; it has no
 * immutables) through anvil_setCode, checked by reading PERMIT2() and WITNESS_TYPE_STRING() back.
 */
async function installUptoProxy(pub: PublicClient): Promise<void> {
  const { bytecode } = JSON.parse(readFileSync(UPTO_ARTIFACT, "utf8")) as { bytecode: Hex };
  const runtime = (await pub.call({ data: bytecode })).data;
  if (!runtime) throw new Error("UptoPermit2Proxy: its creation code returned no runtime code");
  await pub.request({ method: "anvil_setCode" as never, params: [x402UptoPermit2ProxyAddress, runtime] as never });
  const permit2 = await pub.readContract({ address: x402UptoPermit2ProxyAddress, abi, functionName: "PERMIT2" });
  const witness = await pub.readContract({ address: x402UptoPermit2ProxyAddress, abi, functionName: "WITNESS_TYPE_STRING" });
  if (!isAddressEqual(permit2, PERMIT2_ADDRESS) || !witness.includes("Witness(address to,address facilitator,uint256 validAfter)"))
    throw new Error("x402 upto Permit2 proxy did not install");
}
