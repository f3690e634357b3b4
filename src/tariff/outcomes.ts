import type { Usage } from "../providers/types.ts";
import type { ReserveBound } from "./hold.ts";

/**
 * How a held request ended: the provider reported its usage, or reported none (the gateway counts it), the client
 * went away mid-stream, the stream reached the gateway's time cap, or the provider failed before its answer ended.
 */
export type Outcome = "reported" | "counted" | "client_gone" | "time_cap" | "failed";

/** What an outcome is told: the provider's usage, if it came; the gateway's count; whether the client was reading. */
export interface OutcomeFacts {
  reported?: Usage;
  /** The gateway's count (counted.ts): the prompt as the provider reported it or the tokenizer counts it, the output seen. */
  counted?: Usage;
  /** A stopped stream: a pull was waiting on the provider (the client took everything it was sent). */
  reading?: boolean;
  bound: ReserveBound;
}

/**
 * The usage an outcome is billed at, or null when nothing is charged (the hold is released):
 * - reported: the provider's usage, whatever else is known (it is what the provider bills);
 * - counted: the gateway's count, within the hold's bounds (counted.ts);
 * - client gone, time cap: what the provider bills for it. A client that stopped taking output let the provider
 *   generate unseen up to the hold's completion part (max_tokens clamped × n), so that part is charged, never less
 *   than the provider bills and never above the hold; one that took everything pays what it got;
 * - failed: nothing (the spec: a provider failure releases the hold).
 */
export function outcomeUsage(outcome: Outcome, facts: OutcomeFacts): Usage | null {
  if (outcome === "failed") return null;
  if (facts.reported) return facts.reported;
  const counted = facts.counted;
  if (!counted) throw new Error(`outcome ${outcome}: neither a reported nor a counted usage`);
  if (outcome === "counted" || facts.reading) return counted;
  return { ...counted, completion_tokens: facts.bound.completionTokens };
}
