/** One credit lease's state in a process, and how leases are sized and kept (Leases, leases.ts, runs them). */
import type { KeyPrincipal } from "../ledger/ledger.ts";

/** How leases are taken and kept (docs/design.md "Credit leases"). */
export interface LeaseSettings {
  /** Redis expiry of a lease after each call (LEASE_TTL_S): a crashed process's leases are freed within it. */
  ttlMs: number;
  /** Requests are admitted under a lease only this long after the send of its last call Redis confirmed: a revoke, a spent budget or an emptied wallet bites within it. */
  boundMs: number;
  /** A lease in use is renewed (expiry, size, rate slots) this often. */
  renewMs: number;
  /** A lease not used for this long, with nothing in flight, is closed and its credit given back. */
  idleMs: number;
  /** A lease grows to at most this share (per mille) of the credit outside other locks: the wallet's, or the key's budget's if less. */
  sharePerMille: number;
  /** A lease opens only if it can cover this many of the request that asked for it: a smaller wallet is served by a reserve per request. */
  leastHolds: number;
  rateLimitWindowMs: number;
}

/** The defaults: a revoke bites within a second; a lease outlives a stalled renew by several seconds. */
export const LEASE_DEFAULTS = { boundMs: 1_000, renewMs: 250, idleMs: 2_000, sharePerMille: 500, leastHolds: 4 } as const;

/** One process's lease on one key's wallet: what it may admit in memory. */
export class Lease {
  /** The lease's lock in Redis as this process knows it: every lease call's delta and every settle's covered part. */
  cap = 0;
  /** During a lease call, its lowest possible outcome: requests are admitted under min(cap, ceiling). */
  ceiling = Infinity;
  /** µUSDC held by requests admitted under it whose settle this process has not seen yet. */
  inUse = 0;
  slots = 0;
  window = -1;
  /** performance.now() at the send of the last call Redis confirmed. */
  confirmedAt = -Infinity;
  lastCallAt = -Infinity;
  lastUseAt = performance.now();
  calling = false;
  /** The lease call in flight, if any. */
  pending: Promise<void> | undefined;
  /** The give-back after a refused reserve (LeaseGiveBack, leaseGiveBack.ts), once per lease: the refused reserves waiting on it that counted a rate slot, sent and answered by Redis yet. */
  giving: { counted: number; sent: boolean; answered: boolean; result: Promise<boolean> } | undefined;
  /** No more admissions (revoked, expired, closing); dropped once nothing is in use. */
  done = false;
  /** Redis has its marker: closing it gives its lock back (else the sweeper would expire it). */
  opened = false;
  /** The window's requests left beyond every lease's slots, at the last call. */
  rateLeft = 0;
  // Spend over the current renew period, for the next size: peak in use, charges, admissions, largest hold.
  peak = 0;
  charged = 0;
  admitted = 0;
  largest = 0;

  constructor(
    readonly id: string,
    readonly principal: KeyPrincipal,
  ) {}
}

/** A request admitted under a lease: the lease and what the request holds of it. */
export interface LeaseClaim {
  readonly leaseId: string;
  readonly amount: number;
  readonly lease: Lease;
  /** X-RateLimit-Remaining as far as this process knows: the window's requests left, its own slots included. */
  readonly rateRemaining: number;
}
