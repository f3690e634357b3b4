import { t } from "elysia";

/** Wallet address as the spec defines it; case-insensitive, stored lower-case. */
export const Wallet = t.String({ pattern: "^0x[a-fA-F0-9]{40}$", description: "Ethereum address" });

/**
 * One query parameter as a string; a repeated one (an array) counts as absent. Credentials in the query string are
 * read this way instead of through an Elysia schema: the document declares them as security schemes, not parameters.
 */
export const queryString = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);
