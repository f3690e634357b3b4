import { withDeadline } from "../deadline.ts";

/** A facilitator's verdict on a payment (x402 /verify). */
export interface VerifyResult {
  isValid: boolean;
  invalidReason?: string;
  payer?: string;
}

/** A facilitator's settlement (x402 /settle). `transaction` is the on-chain transaction hash on success. */
export interface SettleResult {
  success: boolean;
  errorReason?: string;
  transaction: string;
  network: string;
  payer?: string;
}

/** x402 verify and settle; `payload` and `requirements` are in the client's protocol version (1 or 2). */
export interface Facilitator {
  verify(payload: Record<string, unknown>, requirements: Record<string, unknown>): Promise<VerifyResult>;
  settle(payload: Record<string, unknown>, requirements: Record<string, unknown>): Promise<SettleResult>;
}

/** The facilitator (or the chain behind an in-process one) cannot be reached or did not answer in time: 503. */
export class FacilitatorUnavailable extends Error {
  constructor(
    message: string,
    /** The transfer transaction, when it was sent before the failure (its outcome is then for recovery to learn). */
    readonly transaction?: string,
  ) {
    super(message);
  }
}

/** Runs `fn` with an abort signal that fires after `ms`; a timeout becomes FacilitatorUnavailable. */
export function withTimeout<T>(ms: number, what: string, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
  return withDeadline(ms, fn, () => new FacilitatorUnavailable(`${what} timed out after ${ms} ms`));
}
