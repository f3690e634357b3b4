/** The x402 payment header of a request: found (v2's name, else v1's) and decoded, before any matching. */
import { BareError } from "../errors.ts";

/** The payment header of a request (x402 v2, else v1), or null: a header lookup each, nothing allocated. */
export function paymentHeaderOf(headers: Headers): string | null {
  return headers.get("payment-signature") ?? headers.get("x-payment");
}

const MAX_HEADER = 16 * 1024;
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;
const BASE64URL = /^[A-Za-z0-9_-]+={0,2}$/;

const invalidEncoding = () => new BareError(400, "invalid payment encoding");

/** Base64 JSON object, else 400 `{error}` (spec error rule 5). */
export function decodePaymentHeader(header: string): Record<string, unknown> {
  const text = header.trim();
  if (text.length === 0 || text.length > MAX_HEADER || !(BASE64.test(text) || BASE64URL.test(text))) throw invalidEncoding();
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(text, BASE64.test(text) ? "base64" : "base64url").toString("utf8"));
  } catch {
    throw invalidEncoding();
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw invalidEncoding();
  return value as Record<string, unknown>;
}
