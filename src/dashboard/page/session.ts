/**
 * Sign-in with Ethereum for the page. A session is one signed message that the GET endpoints accept until it
 * runs out (the server takes a message for `issued_at_max_age_s` after its issuedAt, so the page sets
 * expirationTime there, or sooner if the server bounds it by `expiration_max_s`). Creating or revoking a key needs a message the server has never seen (its replay
 * guard), so every change asks the wallet for a fresh signature, which then also serves as the new session.
 */
import type { Address } from "viem";
import { createSiweMessage, generateSiweNonce } from "viem/siwe";
import type { PageConfig } from "../pageConfig.ts";
import { api, ApiFailure, clockOffsetMs } from "./api.ts";
import type { ConnectedWallet } from "./wallet.ts";

/** GET /v1/auth/siwe: the server's SIWE parameters and a fresh nonce. */
export interface SiweParams {
  domain: string;
  uri: string;
  version: "1";
  chain_ids: number[];
  nonce: string;
  /** A statement the server requires, or null (any). */
  statement?: string | null;
  issued_at_max_age_s: number;
  clock_skew_s: number;
  /** Upper bound on expirationTime − issuedAt, or null (none). */
  expiration_max_s?: number | null;
}

/** Credentials the GET endpoints take as query parameters. */
export interface Session {
  wallet: string;
  message: string;
  signature: string;
  /** ms since epoch (local clock) after which the server refuses the message. */
  expiresAt: number;
}

// Sign a little before the server's limit runs out, so a request sent at the last second still passes.
const MARGIN_MS = 15_000;

/** The server's parameters; when the server has no GET /v1/auth/siwe, its rules from the page config. */
async function siweParams(cfg: PageConfig["siwe"]): Promise<SiweParams> {
  try {
    return (await api<SiweParams>("/v1/auth/siwe", { cache: "no-store" })).body;
  } catch (e) {
    if (!(e instanceof ApiFailure) || e.status !== 404) throw e;
    return {
      domain: cfg.domain,
      uri: `${location.protocol}//${cfg.domain}/`,
      version: "1",
      chain_ids: cfg.chainIds,
      nonce: generateSiweNonce(),
      issued_at_max_age_s: cfg.maxAgeS,
      clock_skew_s: cfg.skewS,
    };
  }
}

const storageKey = (wallet: string) => `gw.session.${wallet.toLowerCase()}`;

/** The stored session of this wallet if it is still good for a while. */
export function storedSession(wallet: string): Session | null {
  try {
    const s = JSON.parse(sessionStorage.getItem(storageKey(wallet)) ?? "null") as Session | null;
    return s && s.expiresAt - MARGIN_MS > Date.now() ? s : null;
  } catch {
    return null;
  }
}

export function forgetSession(wallet: string): void {
  sessionStorage.removeItem(storageKey(wallet));
}

/**
 * Asks the wallet to sign a fresh SIWE message. `action` names what the signature is for (shown in the wallet,
 * unless the server prescribes its own statement). The result is stored as the session: a message used once
 * for a change may still be read with until it runs out.
 */
export async function signIn(wallet: ConnectedWallet, cfg: PageConfig["siwe"], action: string): Promise<Session> {
  const p = await siweParams(cfg);
  const walletChain = await wallet.chainId().catch(() => 0);
  const chainId = p.chain_ids.includes(walletChain) ? walletChain : p.chain_ids[0]!;
  // Times by the server's clock: a fast or slow computer clock would otherwise make every message invalid.
  const issuedAt = new Date(Date.now() + clockOffsetMs - 1_000);
  const lifetimeMs = Math.min(p.issued_at_max_age_s, p.expiration_max_s ?? Number.POSITIVE_INFINITY) * 1000;
  const message = createSiweMessage({
    domain: p.domain,
    address: wallet.address as Address,
    uri: p.uri,
    version: "1",
    chainId,
    nonce: p.nonce,
    issuedAt,
    expirationTime: new Date(issuedAt.getTime() + lifetimeMs),
    statement: p.statement ?? action,
  });
  const signature = await wallet.signMessage(message);
  const session = { wallet: wallet.address.toLowerCase(), message, signature, expiresAt: issuedAt.getTime() - clockOffsetMs + lifetimeMs };
  sessionStorage.setItem(storageKey(wallet.address), JSON.stringify(session));
  return session;
}

/** Query string of a session for the GET endpoints. */
export const sessionQuery = (s: Session) => new URLSearchParams({ message: s.message, signature: s.signature }).toString();
