/** The ledger's request and answer shapes (ledger.ts re-exports them): what callers pass and what the scripts answer. */

export interface LedgerLimits {
  rateLimitRequests: number;
  rateLimitWindowMs: number;
  holdTtlMs: number;
}

/** What settle records beside the amount. */
export interface ChargeDetails {
  promptTokens: number;
  completionTokens: number;
  costMicro: number;
  model: string;
  /** Of promptTokens: read from the provider's cache, written to it for 5 minutes, for 1 hour (absent: 0). */
  cachedPromptTokens?: number;
  cacheWriteTokens?: number;
  cacheWrite1hTokens?: number;
}

/** Why a reserve held nothing: the key (unknown or revoked), the wallet's or the key's rate, the key's budget, the balance. */
export type ReserveRefusal =
  | { ok: false; refusal: "UNAUTHORIZED" }
  | { ok: false; refusal: "RATE_LIMITED"; limit: number; windowMs: number; retryAfterMs: number; scope: "wallet" | "key" }
  | { ok: false; refusal: "KEY_BUDGET_EXCEEDED"; budgetLeft: number; required: number }
  | { ok: false; refusal: "INSUFFICIENT_BALANCE"; available: number; required: number };

/** What lease-8 is asked to do with one lease (the script's header says what each means). */
export interface LeaseAsk {
  leaseId: string;
  target: number;
  floor: number;
  sharePerMille: number;
  least: number;
  slots: number;
  /** Unused slots taken earlier in `slotsWindow`; given back only if that is still the current window. */
  slotsBack: number;
  slotsWindow: number;
  ttlMs: number;
}

/** lease-8's answer (`before`: the lease's lock when the call ran), with the rate window its slots belong to. */
export type LeaseReply =
  | { ok: true; locked: number; before: number; available: number; slots: number; rateLeft: number; window: number }
  | { ok: false; refusal: "UNAUTHORIZED"; locked: number; before: number; window: number }
  | { ok: false; refusal: "HOLD_RESOLVED"; window: number };

/** A settle's outcome; a leased one also says how much of the charge came out of the lease's lock. */
export type SettleOutcome = "charged" | "settled" | "released" | "UNKNOWN_HOLD";

/** A reserve's answer: the hold is open (balance left after it, rate-limit requests left), or a refusal. */
export type ReserveOutcome = { ok: true; available: number; rateRemaining: number } | ReserveRefusal;
