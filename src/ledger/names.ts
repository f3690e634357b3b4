import { SLOTS, keySlot } from "../redis/slot.ts";

/** An authenticated API key with its Redis key names computed once (the key → wallet mapping never changes). */
export interface KeyPrincipal {
  keyId: number;
  wallet: string;
  shard: string;
  walletName: string;
  apiKeyName: string;
  /** The key's own limits, fixed at its creation (so cached with it); absent: none. */
  limits?: KeyLimits;
}

/** What a key was created with beyond the gateway-wide rules (POST /v1/auth/keys `models`, `requests_per_minute`). */
export interface KeyLimits {
  /** Catalog ids or "<provider>/*" the key may call; null: any model. */
  models: readonly string[] | null;
  /** Requests per minute of this key, beside the wallet's rate limit; null: none. */
  rpm: number | null;
}

/** The shard count of ledgers built before the even layout: its tags stay `{s00}`…`{s15}` so such a ledger keeps its names. */
export const LEGACY_SHARDS = 16;

const layouts = new Map<number, string[]>();

/**
 * The hash tags of `shards` shards. Shard n's tag is `{sNN}` plus, unless the count is the legacy 16, the first
 * suffix `.k` that puts its slot in the middle half of the n-th of `shards` equal slices of the slot space: a
 * cluster whose masters own equal contiguous slot ranges (what `redis-cli --cluster create` and `rebalance` make)
 * then owns equal numbers of shards (48 shards: 16 on each of 3 masters, 12 on each of 4), where plain `{sNN}`
 * tags fall where CRC16 puts them (16 tags over 3 masters came out 4/6/6). A pure function of the count, so every
 * process sharing a Redis names every key alike.
 */
export function shardTags(shards: number): string[] {
  let tags = layouts.get(shards);
  if (tags) return tags;
  tags = [];
  for (let n = 0; n < shards; n++) {
    const base = `s${n < 10 ? "0" : ""}${n}`;
    if (shards === LEGACY_SHARDS) {
      tags.push(`{${base}}`);
      continue;
    }
    const width = SLOTS / shards;
    const lo = n * width + width / 4;
    const hi = (n + 1) * width - width / 4;
    let tag = base;
    for (let k = 1; ; k++) {
      const slot = keySlot(tag);
      if (slot >= Math.floor(lo) && slot < Math.ceil(hi)) break;
      tag = `${base}.${k}`;
    }
    tags.push(`{${tag}}`);
  }
  layouts.set(shards, tags);
  return tags;
}

/**
 * Every Redis key name the gateway uses, in one place (named "names" so they are never read as API keys). A
 * wallet's names all carry its shard's hash tag, so each Lua script touches one slot: the same code runs on one
 * Redis or a Redis Cluster (docs/operating.md "Scaling out").
 */
export class RedisNames {
  private readonly tags: string[];

  constructor(readonly shards: number) {
    this.tags = shardTags(shards);
  }

  /** Shard of a (lower-case hex) wallet: its last 4 hex digits modulo the shard count — cheap and even. */
  shardOf(wallet: string): string {
    return this.tags[Number.parseInt(wallet.slice(-4), 16) % this.shards]!;
  }

  allShards(): string[] {
    return this.tags.slice();
  }

  /** A wallet's hash: balance, locked. */
  wallet(shard: string, wallet: string) {
    return `gw:${shard}:w:${wallet}`;
  }
  /** An API key's hash: its state (revoked, budget) and counters (spent, locked, requests, tokens, revenue). */
  apiKey(shard: string, keyId: number | string) {
    return `gw:${shard}:k:${keyId}`;
  }
  holds(shard: string) {
    return `gw:${shard}:holds`;
  }
  /** One hold's whole state: "live|amount|wallet|keyId" while held, then settled | released | expired. */
  holdMarker(shard: string, holdId: string) {
    return `gw:${shard}:hd:${holdId}`;
  }
  rate(shard: string, wallet: string, window: number) {
    return `gw:${shard}:rl:${wallet}:${window}`;
  }
  outbox(shard: string) {
    return `gw:${shard}:outbox`;
  }
  credited(shard: string) {
    return `gw:${shard}:credited`;
  }
  /**
   * The shard's ledger fence: the ledger epoch while balance changes may run, "R:<epoch>" while a rebuild runs
   * ("R:<epoch>:<n>" after its n-th write batch into the shard: rebuild/batch.ts).
   * Every balance-changing script checks it against the epoch its caller believes in (one slot per script).
   */
  fence(shard: string) {
    return `gw:${shard}:fence`;
  }
  /** API key hash → "keyId|wallet" (then "|rpm|models" for a key created with limits); immutable, so it is safe to cache in process forever. */
  keyHash(sha256: string) {
    return `gw:kh:${sha256}`;
  }
  siweSeen(sha256: string) {
    return `gw:siwe:${sha256}`;
  }
  /**
   * A stored Responses API response (POST /v1/responses): its whole conversation's items, JSON, under the wallet's
   * shard tag and address, so no other wallet can name it; it expires (RESPONSES_STORE_TTL_S).
   */
  storedResponse(shard: string, wallet: string, responseId: string) {
    return `gw:${shard}:rsp:${wallet}:${responseId}`;
  }
  /** What a wallet stored in the Responses store in one window of the store's lifetime (store-response-3.lua). */
  storeUsage(shard: string, wallet: string, window: number) {
    return `gw:${shard}:rsu:${wallet}:${window}`;
  }
  /** One output item of a stored response (an `item_reference` names it by its id), beside the response. */
  storedItem(shard: string, wallet: string, itemId: string) {
    return `gw:${shard}:rit:${wallet}:${itemId}`;
  }
  /** Set once the ledger has been built (or rebuilt from Postgres); absent means Redis came up empty. */
  readonly ready = "gw:ledger:ready";
  /** Counter of ledger epochs: each rebuild takes the next one. */
  readonly epoch = "gw:ledger:epoch";
  /** LEDGER_SHARDS the ledger was built with: another value would move every wallet to another shard. */
  readonly shardCount = "gw:ledger:shards";
  /** The rebuild lock: its owner's token, with a lifetime the owner renews while it works. */
  readonly rebuildLock = "gw:ledger:rebuilding";
  /**
   * Settled payments whose Postgres write failed even after retries: event id → CreditInput JSON. The ledger is
   * credited at once (idempotent by event id); the repair job inserts them into Postgres and removes them here
   * (store/credits.ts). A hash on one key, so it works on a Redis Cluster too.
   */
  readonly creditOutbox = "gw:credits:outbox";

  /** SCAN pattern of every wallet hash (then filtered with `isWallet`). */
  readonly walletPattern = "gw:*:w:*";
  /** SCAN pattern of every wallet and API key hash (then read with `parseRecord`). */
  readonly recordPattern = "gw:{s*}:[wk]:*";

  /** A well-formed wallet hash name: the shard tag and a lower-case address. */
  isWallet(name: string): boolean {
    return WALLET.test(name);
  }

  /** Shard, kind (w: wallet, k: API key) and id of a wallet or API key hash name; null for any other name. */
  parseRecord(name: string): { shard: string; kind: "w" | "k"; id: string } | null {
    const m = RECORD.exec(name);
    return m ? { shard: m[1]!, kind: m[2] as "w" | "k", id: m[3]! } : null;
  }
}

// Shard tags are `{sNN}` or `{sNN.k}` (shardTags).
const WALLET = /^gw:\{s\d+(?:\.\d+)?\}:w:0x[0-9a-f]{40}$/;
const RECORD = /^gw:(\{s\d+(?:\.\d+)?\}):([wk]):(.+)$/;
