/**
 * The EIP-712 types a payer signs, with no imports so the browser dashboard can bundle them too: the gateway
 * checks signatures against the very types the page signs with.
 */

/** EIP-3009's typed data: what a USDC payer signs and the gateway checks before the facilitator is asked. */
export const TRANSFER_WITH_AUTHORIZATION_TYPES = {
  TransferWithAuthorization: [
    { name: "from", type: "address" },
    { name: "to", type: "address" },
    { name: "value", type: "uint256" },
    { name: "validAfter", type: "uint256" },
    { name: "validBefore", type: "uint256" },
    { name: "nonce", type: "bytes32" },
  ],
} as const;

/** EIP-2612's typed data: what a USDT payer signs for the relayer. */
export const permitTypes = {
  Permit: [
    { name: "owner", type: "address" },
    { name: "spender", type: "address" },
    { name: "value", type: "uint256" },
    { name: "nonce", type: "uint256" },
    { name: "deadline", type: "uint256" },
  ],
} as const;
