import { type Address, isAddressEqual, type Log, parseAbi, parseEventLogs } from "viem";

/** The stablecoin functions and events the gateway reads or calls: EIP-20, EIP-2612 and EIP-3009. */
export const tokenAbi = parseAbi([
  "function balanceOf(address a) view returns (uint256)",
  "function nonces(address a) view returns (uint256)",
  "function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)",
  "function transferFrom(address from, address to, uint256 value) returns (bool)",
  "function authorizationState(address authorizer, bytes32 nonce) view returns (bool)",
  "event Transfer(address indexed from, address indexed to, uint256 value)",
  "event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)",
]);

/** Whether a transaction's logs hold the token's Transfer of exactly `value` from `from` to `to`: the payment. */
export function transferred(logs: Log[], token: Address, from: Address, to: Address, value: bigint): boolean {
  return parseEventLogs({ abi: tokenAbi, eventName: "Transfer", logs: logs.filter((l) => isAddressEqual(l.address, token)) }).some(
    (l) => isAddressEqual(l.args.from, from) && isAddressEqual(l.args.to, to) && l.args.value === value,
  );
}
