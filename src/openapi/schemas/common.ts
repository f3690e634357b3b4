import { Type as T } from "@sinclair/typebox";

/**
 * The building blocks of the named schemas (components.ts), so every area writes an amount, a date or a wallet
 * the same way.
 */

/** A pointer at another named schema (answers only: request bodies hold no `$ref`). */
export const ref = (name: string) => T.Unsafe({ $ref: `#/components/schemas/${name}` });
/** A non-negative integer (or from `min`). */
export const Int = (description?: string, min = 0) => T.Integer({ minimum: min, ...(description ? { description } : {}) });
/** An amount in µUSDC, said so in its description. */
export const Micro = (description: string) => T.Integer({ description: `${description}, µUSDC (1 USD = 1,000,000)` });
export const DateTime = T.String({ format: "date-time" });
export const WalletString = T.String({ pattern: "^0x[a-fA-F0-9]{40}$", description: "Ethereum address (answers give it lower-case)" });
/** No fields beyond those listed: answers are exact. */
export const closed = { additionalProperties: false };
// A string enum as generators read it (`enum`), rather than TypeBox's anyOf of consts.
export const Enum = (values: string[], description?: string) =>
  T.Unsafe<string>({ type: "string", enum: values, ...(description ? { description } : {}) });
