import type { Hex } from "viem";
import { ApiError } from "../errors.ts";
import type { RedisNames } from "../ledger/names.ts";
import type { RedisCommands } from "../redis/connect.ts";
import { log } from "../log.ts";

const MAX_MESSAGE_BYTES = 4096;
/** A message is accepted at most this long after its issuedAt, whatever its expirationTime says. */
export const SIWE_MAX_AGE_MS = 10 * 60_000;
/** Allowance for a client clock ahead of ours (issuedAt, notBefore) and for the replay guard's lifetime. */
export const SIWE_CLOCK_SKEW_MS = 60_000;

/**
 * A fresh SIWE nonce: 128 bits from the platform's CSPRNG as 32 hex characters (EIP-4361 asks 8+ alphanumerics).
 * viem's generateSiweNonce draws from Math.random through a shared buffer, so consecutive nonces differed by one
 * character: predictable.
 */
export function siweNonce(): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(16))).toString("hex");
}
const MAX_AGE_MS = SIWE_MAX_AGE_MS;
const CLOCK_SKEW_MS = SIWE_CLOCK_SKEW_MS;

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
  /** Accepted domains, the configured one first (local mode adds the other loopback spellings). */
  domains: string[];
  chainIds: number[];
}

/**
 * A failed rule. Its message goes to the client: it names the rule (and the public parameters of
 * GET /v1/auth/siwe) but never echoes the message, the signature or the recovered signer.
 */
class SiweRejected extends Error {}

/** Verifies Sign-In with Ethereum messages by every rule of docs/clients.md "Signing in"; each failure is a 401 naming its rule. */
export class SiweVerifier {
  constructor(
    private readonly redis: RedisCommands,
    private readonly names: RedisNames,
    private readonly rules: SiweRules,
  ) {}

  /** The accepted domain a client reached us by (its Host), else the configured one: what GET /v1/auth/siwe offers. */
  domainFor(host: string | null): string {
    return host && this.rules.domains.includes(host) ? host : this.rules.domains[0]!;
  }

  /** Returns the signer's wallet (lower-case) or throws 401 UNAUTHORIZED whose message names the failed rule. */
  async verify(creds: SiweCredentials, use: SiweUse): Promise<string> {
    try {
      return await this.check(creds, use);
    } catch (e) {
      if (e instanceof SiweRejected) {
        log.info("SIWE rejected", { reason: e.message });
        throw new ApiError({ code: "UNAUTHORIZED", message: `SIWE rejected: ${e.message}` });
      }
      throw e;
    }
  }

  private async check({ message, signature }: SiweCredentials, use: SiweUse): Promise<string> {
    // viem's SIWE and signature code (~250 modules, ~8 MiB resident) is loaded with the first sign-in, not at
    // start; from viem/utils rather than viem, whose index loads ~430 (docs/benchmarks.md, "Memory").
    const [{ isHex, recoverMessageAddress }, { createSiweMessage, parseSiweMessage }] = await Promise.all([
      import("viem/utils"),
      import("viem/siwe"),
    ]);
    if (typeof message !== "string" || typeof signature !== "string") throw new SiweRejected("message and signature are required");
    if (Buffer.byteLength(message) > MAX_MESSAGE_BYTES)
      throw new SiweRejected(`malformed: the message is longer than ${MAX_MESSAGE_BYTES} bytes`);
    if (!isHex(signature) || signature.length !== 132) throw new SiweRejected("signature: not 65 bytes of 0x-prefixed hex");

    const m = parseSiweMessage(message);
    if (m.version !== undefined && m.version !== "1") throw new SiweRejected('version: must be "1"');
    if (!m.address || !m.domain || !m.uri || !m.nonce || !m.issuedAt || m.version !== "1" || m.chainId === undefined) {
      throw new SiweRejected("malformed: not an EIP-4361 message with domain, address, URI, Version, Chain ID, Nonce and Issued At");
    }
    if (!/^[A-Za-z0-9]{8,}$/.test(m.nonce)) throw new SiweRejected("nonce: must be at least 8 letters or digits");
    let canonical: string;
    try {
      canonical = createSiweMessage({
        ...m,
        address: m.address,
        chainId: m.chainId,
        domain: m.domain,
        nonce: m.nonce,
        uri: m.uri,
        version: "1",
      });
    } catch {
      throw new SiweRejected("malformed: a field has an invalid value");
    }
    // Strict parsing: anything the grammar parser skipped over (extra lines, reordered fields) fails here.
    if (canonical !== message) throw new SiweRejected("malformed: not in canonical EIP-4361 form (extra or reordered lines)");

    const domains = this.rules.domains;
    if (!domains.includes(m.domain)) throw new SiweRejected(`domain: must be ${domains.map((d) => `"${d}"`).join(" or ")}`);
    let uriHost: string;
    try {
      uriHost = new URL(m.uri).host;
    } catch {
      throw new SiweRejected("uri: not a URL");
    }
    if (uriHost !== m.domain) throw new SiweRejected(`uri: must be on the message's domain (e.g. http(s)://${m.domain})`);
    if (!this.rules.chainIds.includes(m.chainId))
      throw new SiweRejected(`chain: Chain ID must be one of ${this.rules.chainIds.join(", ")}`);

    const now = Date.now();
    const issued = m.issuedAt.getTime();
    if (issued < now - MAX_AGE_MS)
      throw new SiweRejected(`issued too long ago: Issued At is more than ${MAX_AGE_MS / 1000} s old; sign a new message`);
    if (issued > now + CLOCK_SKEW_MS)
      throw new SiweRejected(`not yet valid: Issued At is more than ${CLOCK_SKEW_MS / 1000} s in the future`);
    if (m.expirationTime && m.expirationTime.getTime() <= now) throw new SiweRejected("expired: Expiration Time has passed");
    if (m.notBefore && m.notBefore.getTime() > now + CLOCK_SKEW_MS) throw new SiweRejected("not yet valid: Not Before is in the future");

    let signer: string;
    try {
      signer = await recoverMessageAddress({ message, signature: signature as Hex });
    } catch {
      throw new SiweRejected("signature: cannot be recovered");
    }
    const wallet = m.address.toLowerCase();
    if (signer.toLowerCase() !== wallet) throw new SiweRejected("signature: not signed by the message's address");

    // The replay guard lives in Redis: after Redis lost its data and the ledger was rebuilt, a message signed
    // before that moment may have been used already, so it can no longer mint or revoke keys.
    if (use === "once") {
      const rebuiltAt = Date.parse((await this.redis.get(this.names.ready)) ?? "");
      if (issued < rebuiltAt) throw new SiweRejected("replayed: signed before the ledger was rebuilt; sign a new message");
    }

    // Remember the message for as long as it could pass the checks above, plus the skew allowance.
    const until = Math.min(issued + MAX_AGE_MS, m.expirationTime?.getTime() ?? Number.POSITIVE_INFINITY) + CLOCK_SKEW_MS;
    const fresh = await this.redis.set(this.names.siweSeen(sha256(message)), "1", "PX", Math.max(1000, until - now), "NX");
    if (use === "once" && fresh === null)
      throw new SiweRejected("replayed: this message was used before; sign a new one for each key creation or revocation");
    return wallet;
  }
}

function sha256(s: string): string {
  return new Bun.CryptoHasher("sha256").update(s).digest("hex");
}
