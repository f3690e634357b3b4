/**
 * EVM addresses (EIP-55), as viem's isAddress / getAddress / isAddressEqual check and write them, on keccak-256
 * alone: importing `viem` for these loads ~420 modules (~12 MiB resident), which a gateway that takes no payment
 * never needs; the rest of viem is imported where a payment or a sign-in is handled (docs/benchmarks.md, "Memory").
 */
import { keccak_256 } from "@noble/hashes/sha3";
import type { Address } from "viem";

const ADDRESS = /^0x[a-fA-F0-9]{40}$/;
const encoder = new TextEncoder();

/** The EIP-55 checksummed form of a well-formed address (its casing ignored). */
function checksum(address: string): Address {
  const hex = address.slice(2).toLowerCase();
  const hash = keccak_256(encoder.encode(hex));
  let out = "0x";
  for (let i = 0; i < 40; i++) {
    // Each hex digit of the address is upper-cased where the matching nibble of the hash is 8 or more.
    const nibble = i % 2 === 0 ? hash[i >> 1]! >> 4 : hash[i >> 1]! & 0x0f;
    out += nibble >= 8 ? hex[i]!.toUpperCase() : hex[i]!;
  }
  return out as Address;
}

/** A 0x-prefixed 20-byte hex string; `strict` (the default): a mixed-case one must carry its EIP-55 checksum. */
export function isAddress(address: string, options?: { strict?: boolean }): address is Address {
  if (!ADDRESS.test(address)) return false;
  if (options?.strict === false || address.toLowerCase() === address) return true;
  return checksum(address) === address;
}

/** The checksummed form of an address in any casing; throws when the string is not an address. */
export function getAddress(address: string): Address {
  if (!ADDRESS.test(address)) throw new Error(`Address "${address}" is invalid.`);
  return checksum(address);
}

/** Whether two addresses are the same account (casing ignored); throws when either is not an address. */
export function isAddressEqual(a: string, b: string): boolean {
  for (const x of [a, b]) if (!ADDRESS.test(x)) throw new Error(`Address "${x}" is invalid.`);
  return a.toLowerCase() === b.toLowerCase();
}
