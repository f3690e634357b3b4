/**
 * x402's `sign-in-with-x` extension (CAIP-122, EVM form: an EIP-4361 message signed with EIP-191): a wallet proves
 * itself on one model call, in the `SIGN-IN-WITH-X` header (base64 JSON of the message's fields and the signature),
 * and the call is charged from its balance. The 402 of a call without a key declares it with a fresh challenge.
 * The message the fields make is held to every SIWE rule of docs/clients.md "Signing in" (SiweVerifier, used once), and its nonce is
 * spent: a nonce seen before is refused whatever else the message says.
 */
import { ApiError } from "../errors.ts";
import type { RedisNames } from "../ledger/names.ts";
import type { RedisCommands } from "../redis/connect.ts";
import { SIWE_CLOCK_SKEW_MS, SIWE_MAX_AGE_MS, type SiweVerifier } from "./siwe.ts";

export const SIGN_IN_WITH_X = "sign-in-with-x";
export const SIWX_HEADER = "sign-in-with-x";
const MAX_HEADER = 8 * 1024;
const CHALLENGE_TTL_MS = 5 * 60_000;

const rejected = (why: string) => new ApiError({ code: "UNAUTHORIZED", message: `SIWx rejected: ${why}` });

const SCHEMA = {
  $schema: "https://json-schema.org/draft/2020-12/schema",
  type: "object",
  properties: {
    domain: { type: "string" },
    address: { type: "string" },
    statement: { type: "string" },
    uri: { type: "string", format: "uri" },
    version: { type: "string" },
    chainId: { type: "string" },
    type: { type: "string" },
    nonce: { type: "string" },
    issuedAt: { type: "string", format: "date-time" },
    expirationTime: { type: "string", format: "date-time" },
    notBefore: { type: "string", format: "date-time" },
    requestId: { type: "string" },
    resources: { type: "array", items: { type: "string", format: "uri" } },
    signature: { type: "string" },
  },
  required: ["domain", "address", "uri", "version", "chainId", "type", "nonce", "issuedAt", "signature"],
};

/** The fields of a SIGN-IN-WITH-X header, as the x402 extension defines them. */
export interface SiwxProof {
  domain: string;
  address: string;
  uri: string;
  version: string;
  chainId: string;
  type: string;
  nonce: string;
  issuedAt: string;
  expirationTime?: string;
  notBefore?: string;
  statement?: string;
  requestId?: string;
  resources?: string[];
  signature: string;
}

export class SiwxVerifier {
  constructor(
    private readonly siwe: SiweVerifier,
    private readonly redis: RedisCommands,
    private readonly names: RedisNames,
    private readonly chainId: number,
  ) {}

  /** `extensions["sign-in-with-x"]` of a 402 for `resource`: a fresh challenge (a nonce never issued before). */
  declaration(resource: string, host: string | null): Record<string, unknown> {
    const now = Date.now();
    return {
      info: {
        domain: this.siwe.domainFor(host),
        uri: resource,
        version: "1",
        nonce: Buffer.from(crypto.getRandomValues(new Uint8Array(16))).toString("hex"),
        issuedAt: new Date(now).toISOString(),
        expirationTime: new Date(now + CHALLENGE_TTL_MS).toISOString(),
        statement: "Sign in to spend this wallet's gateway balance on this call",
        resources: [resource],
      },
      supportedChains: [{ chainId: `eip155:${this.chainId}`, type: "eip191" }],
      schema: SCHEMA,
    };
  }

  /** The wallet (lower-case) the header proves, or 401 UNAUTHORIZED naming the rule it broke. */
  async verify(header: string): Promise<string> {
    const p = decode(header);
    if (p.type !== "eip191") throw rejected('type: only "eip191" (EVM) is accepted');
    const chain = /^eip155:(\d{1,12})$/.exec(p.chainId);
    if (!chain) throw rejected('chainId: must be a CAIP-2 "eip155:<id>"');
    const issuedAt = new Date(p.issuedAt);
    const expirationTime = p.expirationTime === undefined ? undefined : new Date(p.expirationTime);
    const notBefore = p.notBefore === undefined ? undefined : new Date(p.notBefore);
    if ([issuedAt, expirationTime, notBefore].some((d) => d !== undefined && Number.isNaN(d.getTime())))
      throw rejected("issuedAt, expirationTime, notBefore: must be ISO 8601 date-times");
    const { createSiweMessage } = await import("viem/siwe");
    let message: string;
    try {
      message = createSiweMessage({
        domain: p.domain,
        address: p.address as `0x${string}`,
        statement: p.statement,
        uri: p.uri,
        version: "1",
        chainId: Number(chain[1]),
        nonce: p.nonce,
        issuedAt,
        expirationTime,
        notBefore,
        requestId: p.requestId,
        resources: p.resources,
      });
    } catch {
      throw rejected("malformed: a field has an invalid value");
    }
    let wallet: string;
    try {
      wallet = await this.siwe.verify({ message, signature: p.signature }, "once");
    } catch (e) {
      if (e instanceof ApiError) throw rejected(e.message.replace(/^SIWE rejected: /, ""));
      throw e;
    }
    // A nonce serves once, whatever message carried it (the message itself is already spent above).
    const ttl = SIWE_MAX_AGE_MS + 2 * SIWE_CLOCK_SKEW_MS;
    const fresh = await this.redis.set(this.names.siweSeen(`siwx-nonce:${p.nonce}`), "1", "PX", ttl, "NX");
    if (fresh === null) throw rejected("replayed: this nonce was used before; sign a new challenge for each call");
    return wallet;
  }
}

function decode(header: string): SiwxProof {
  const text = header.trim();
  if (text.length === 0 || text.length > MAX_HEADER) throw rejected("malformed: not base64 JSON");
  let v: unknown;
  try {
    v = JSON.parse(Buffer.from(text, "base64").toString("utf8"));
  } catch {
    throw rejected("malformed: not base64 JSON");
  }
  const o = v as Record<string, unknown>;
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw rejected("malformed: not base64 JSON");
  for (const f of SCHEMA.required) if (typeof o[f] !== "string") throw rejected(`${f}: required (a string)`);
  for (const f of ["expirationTime", "notBefore", "statement", "requestId"])
    if (o[f] !== undefined && typeof o[f] !== "string") throw rejected(`${f}: must be a string`);
  if (o.resources !== undefined && !(Array.isArray(o.resources) && o.resources.every((r) => typeof r === "string")))
    throw rejected("resources: must be a list of URIs");
  if (o.version !== "1") throw rejected('version: must be "1"');
  return o as unknown as SiwxProof;
}
