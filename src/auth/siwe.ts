import type { Redis } from "ioredis";
import { type Hex, isHex, recoverMessageAddress } from "viem";
import { createSiweMessage, parseSiweMessage } from "viem/siwe";
import { ApiError } from "../errors.ts";
import type { LedgerKeys } from "../ledger/keys.ts";
import { log } from "../log.ts";

const MAX_MESSAGE_BYTES = 4096;
const MAX_AGE_MS = 10 * 60_000;
const CLOCK_SKEW_MS = 60_000;

/** SiweAuth as it arrives in a body or query string. */
export interface SiweCredentials {
  message?: unknown;
  signature?: unknown;
}

/**
 * `once`: POST and DELETE accept only a message never seen before, so a message leaked from a GET query string
 * in some log cannot mint or revoke keys. `reuse`: GET may present the same message until it expires.
 */
export type SiweUse = "once" | "reuse";

export interface SiweRules {
  domain: string;
  chainIds: number[];
}

class SiweRejected extends Error {}

/** Verifies Sign-In with Ethereum messages by every rule of design §5; all failures are one 401. */
export class SiweVerifier {
  constructor(
    private readonly redis: Redis,
    private readonly keys: LedgerKeys,
    private readonly rules: SiweRules,
  ) {}

  /** Returns the signer's wallet (lower-case) or throws 401 UNAUTHORIZED; the reason goes to the log only. */
  async verify(creds: SiweCredentials, use: SiweUse): Promise<string> {
    try {
      return await this.check(creds, use);
    } catch (e) {
      if (e instanceof SiweRejected) {
        log.info("SIWE rejected", { reason: e.message });
        throw new ApiError("UNAUTHORIZED", "Invalid or expired SIWE message or signature");
      }
      throw e;
    }
  }

  private async check({ message, signature }: SiweCredentials, use: SiweUse): Promise<string> {
    if (typeof message !== "string" || typeof signature !== "string") throw new SiweRejected("message and signature are required");
    if (Buffer.byteLength(message) > MAX_MESSAGE_BYTES) throw new SiweRejected("message too long");
    if (!isHex(signature) || signature.length !== 132) throw new SiweRejected("signature is not 65 bytes of hex");

    const m = parseSiweMessage(message);
    if (!m.address || !m.domain || !m.uri || !m.nonce || !m.issuedAt || m.version !== "1" || m.chainId === undefined) {
      throw new SiweRejected("message lacks a required field");
    }
    let canonical: string;
    try {
      canonical = createSiweMessage({ ...m, address: m.address, chainId: m.chainId, domain: m.domain, nonce: m.nonce, uri: m.uri, version: "1" });
    } catch {
      throw new SiweRejected("message has an invalid field");
    }
    // Strict parsing: anything the grammar parser skipped over (extra lines, reordered fields) fails here.
    if (canonical !== message) throw new SiweRejected("message is not in canonical EIP-4361 form");

    if (m.domain !== this.rules.domain) throw new SiweRejected("wrong domain");
    let uriHost: string;
    try {
      uriHost = new URL(m.uri).host;
    } catch {
      throw new SiweRejected("uri is not a URL");
    }
    if (uriHost !== this.rules.domain) throw new SiweRejected("uri is not on the domain");
    if (!this.rules.chainIds.includes(m.chainId)) throw new SiweRejected("chain id not allowed");
    if (!/^[A-Za-z0-9]{8,}$/.test(m.nonce)) throw new SiweRejected("nonce too short");

    const now = Date.now();
    const issued = m.issuedAt.getTime();
    if (issued < now - MAX_AGE_MS) throw new SiweRejected("issuedAt too old");
    if (issued > now + CLOCK_SKEW_MS) throw new SiweRejected("issuedAt in the future");
    if (m.expirationTime && m.expirationTime.getTime() <= now) throw new SiweRejected("expired");
    if (m.notBefore && m.notBefore.getTime() > now + CLOCK_SKEW_MS) throw new SiweRejected("not valid yet");

    let signer: string;
    try {
      signer = await recoverMessageAddress({ message, signature: signature as Hex });
    } catch {
      throw new SiweRejected("signature cannot be recovered");
    }
    const wallet = m.address.toLowerCase();
    if (signer.toLowerCase() !== wallet) throw new SiweRejected("signer is not the message address");

    // The replay guard lives in Redis: after Redis lost its data and the ledger was rebuilt, a message signed
    // before that moment may have been used already, so it can no longer mint or revoke keys.
    if (use === "once") {
      const rebuiltAt = Date.parse((await this.redis.get(this.keys.ready)) ?? "");
      if (issued < rebuiltAt) throw new SiweRejected("message predates the ledger rebuild");
    }

    // Remember the message for as long as it could pass the checks above, plus the skew allowance.
    const until = Math.min(issued + MAX_AGE_MS, m.expirationTime?.getTime() ?? Number.POSITIVE_INFINITY) + CLOCK_SKEW_MS;
    const fresh = await this.redis.set(this.keys.siweSeen(sha256(message)), "1", "PX", Math.max(1000, until - now), "NX");
    if (use === "once" && fresh === null) throw new SiweRejected("message was used before");
    return wallet;
  }
}

function sha256(s: string): string {
  return new Bun.CryptoHasher("sha256").update(s).digest("hex");
}
