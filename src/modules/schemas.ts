import { t } from "elysia";

/** Wallet address as the spec defines it; case-insensitive, stored lower-case. */
export const Wallet = t.String({ pattern: "^0x[a-fA-F0-9]{40}$", description: "Ethereum address" });

/** The spec's error body. */
export const ErrorBody = t.Object({ error: t.String(), message: t.String() }, { additionalProperties: true });

/** SIWE credentials as GET query parameters. */
export const SiweQuery = t.Object({ message: t.Optional(t.String()), signature: t.Optional(t.String()) }, { additionalProperties: true });
