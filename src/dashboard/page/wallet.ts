/**
 * Browser wallets: EIP-6963 discovery (every installed wallet announces itself by name and icon), the legacy
 * `window.ethereum` when none announces, and the few things the page asks of the connected one, through viem.
 */
import {
  type Address,
  createClient,
  custom,
  decodeFunctionResult,
  type EIP1193Provider,
  encodeFunctionData,
  getAddress,
  type Hex,
  numberToHex,
  parseAbi,
} from "viem";
import { signMessage, signTypedData } from "viem/actions";

/** EIP-6963 provider info. */
export interface WalletInfo {
  uuid: string;
  name: string;
  icon: string;
  rdns: string;
}

export interface DiscoveredWallet {
  info: WalletInfo;
  provider: EIP1193Provider;
}

const tokenAbi = parseAbi(["function balanceOf(address) view returns (uint256)", "function nonces(address) view returns (uint256)"]);

/**
 * Calls `onChange` with every wallet found so far, now and whenever another announces itself. A wallet that
 * only injects `window.ethereum` is offered as "Browser wallet" if nothing announces within a moment.
 */
export function discoverWallets(onChange: (wallets: DiscoveredWallet[]) => void): void {
  const found = new Map<string, DiscoveredWallet>();
  window.addEventListener("eip6963:announceProvider", (event) => {
    const d = (event as CustomEvent<DiscoveredWallet>).detail;
    if (!d?.info?.uuid || typeof d.provider?.request !== "function") return;
    found.set(d.info.uuid, d);
    onChange([...found.values()]);
  });
  window.dispatchEvent(new Event("eip6963:requestProvider"));
  setTimeout(() => {
    const legacy = (window as { ethereum?: EIP1193Provider }).ethereum;
    if (found.size === 0 && legacy)
      found.set("legacy", { info: { uuid: "legacy", name: "Browser wallet", icon: "", rdns: "" }, provider: legacy });
    onChange([...found.values()]);
  }, 400);
}

/** A wallet the owner connected: its address, and the signatures and reads the page needs from it. */
export class ConnectedWallet {
  private readonly client;

  private constructor(
    readonly info: WalletInfo,
    readonly provider: EIP1193Provider,
    readonly address: Address,
  ) {
    this.client = createClient({ account: address, transport: custom(provider) });
  }

  /** Asks the wallet for its account (the wallet shows its own prompt). */
  static async connect(d: DiscoveredWallet): Promise<ConnectedWallet> {
    const accounts = (await d.provider.request({ method: "eth_requestAccounts" })) as string[];
    if (!accounts[0]) throw new Error("the wallet shared no account");
    return new ConnectedWallet(d.info, d.provider, getAddress(accounts[0]));
  }

  async chainId(): Promise<number> {
    return Number(await this.provider.request({ method: "eth_chainId" }));
  }

  /** Makes the wallet use `chainId`; a wallet that does not know the chain fails with code 4902. */
  async useChain(chainId: number): Promise<void> {
    if ((await this.chainId()) === chainId) return;
    await this.provider.request({ method: "wallet_switchEthereumChain", params: [{ chainId: numberToHex(chainId) }] });
  }

  /** EIP-191 personal_sign (SIWE). */
  signMessage(message: string): Promise<Hex> {
    return signMessage(this.client, { account: this.address, message });
  }

  /** EIP-712 eth_signTypedData_v4 (the payment authorizations). */
  signTypedData(args: Parameters<typeof signTypedData>[1]): Promise<Hex> {
    return signTypedData(this.client, args);
  }

  private async readToken(token: Address, functionName: "balanceOf" | "nonces", who: Address): Promise<bigint> {
    const data = await this.provider.request({
      method: "eth_call",
      params: [{ to: token, data: encodeFunctionData({ abi: tokenAbi, functionName, args: [who] }) }, "latest"],
    });
    return decodeFunctionResult({ abi: tokenAbi, functionName, data: data as Hex });
  }

  /** The owner's balance of a token, through the wallet's own node. */
  tokenBalance(token: Address): Promise<bigint> {
    return this.readToken(token, "balanceOf", this.address);
  }

  /** EIP-2612 nonce of the owner: part of what a permit signs. */
  permitNonce(token: Address): Promise<bigint> {
    return this.readToken(token, "nonces", this.address);
  }

  /** Calls `f` when the wallet switches account or chain (the page then starts over or re-reads). */
  onChange(f: (what: "accounts" | "chain") => void): void {
    this.provider.on?.("accountsChanged", () => f("accounts"));
    this.provider.on?.("chainChanged", () => f("chain"));
  }
}
