import { ApiError } from "../errors.ts";
import type { ApiKeyAuth } from "./apiKeys.ts";
import type { SiweVerifier } from "./siwe.ts";

/** Where a wallet-scoped request may carry its credentials. */
export interface WalletCredentials {
  authorization: string | null;
  /** Only top-up history accepts the key in the query string (spec: API key alternative). */
  apiKeyQuery?: string;
  message?: string;
  signature?: string;
}

/**
 * Wallet-scoped endpoints need credentials of that very wallet: an active API key of it, or a SIWE message it
 * signed. Another wallet's key, a revoked key or no credentials at all are one 401 (docs/clients.md "Signing in").
 */
export async function requireWallet(auth: ApiKeyAuth, siwe: SiweVerifier, wallet: string, c: WalletCredentials): Promise<void> {
  let owner: string;
  if (c.authorization || c.apiKeyQuery) {
    const p = c.authorization ? await auth.fromHeader(c.authorization) : await auth.resolve(c.apiKeyQuery!);
    await auth.assertActive(p);
    owner = p.wallet;
  } else if (c.message !== undefined || c.signature !== undefined) {
    owner = await siwe.verify({ message: c.message, signature: c.signature }, "reuse");
  } else {
    throw new ApiError("UNAUTHORIZED");
  }
  if (owner !== wallet) throw new ApiError("UNAUTHORIZED");
}
