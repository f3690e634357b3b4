import type { RedisNames } from "./names.ts";
import type { ChargeDetails } from "./types.ts";

/** A settle of one request, as the batch script takes it (`lease`: admitted under that lease, settle-leased-batch). */
export interface SettleItem extends ChargeDetails {
  lease?: string;
  /** What the request held of its lease. */
  held?: number;
  shard: string;
  walletName: string;
  apiKeyName: string;
  wallet: string;
  keyId: number;
  holdId: string;
  charge: number;
}

/** A reserve of one request, as the batch script takes it. */
export interface ReserveItem {
  shard: string;
  walletName: string;
  apiKeyName: string;
  wallet: string;
  keyId: number;
  holdId: string;
  amount: number;
  /** The key's requests per minute; 0: none. */
  rpm: number;
}

/**
 * reserve-batch.lua's KEYS and ARGV for one call: `groups` the call's items by shard (in their order), `epochs`
 * each shard's epoch, `now` the gateway clock that picks the rate windows. Each wallet (with its two rate counters)
 * and key of the batch goes once, each item as its marker, hold id and amount.
 */
export function reserveArgs(
  names: RedisNames,
  groups: Map<string, ReserveItem[]>,
  epochs: string[],
  limits: { rateLimitRequests: number; rateLimitWindowMs: number; holdTtlMs: number },
  now: number,
): { keys: string[]; argv: string[] } {
  // The window is the gateway clock's at send time, like one call's: every item of a batch shares it.
  const { rateLimitRequests: limit, rateLimitWindowMs: windowMs } = limits;
  const window = Math.floor(now / windowMs);
  // The keys' own rate limits count per minute (requests_per_minute), on the same clock.
  const minute = Math.floor(now / 60_000);
  const wallets = new Map<string, number>();
  const walletKeys: string[] = [];
  const keys = new Map<string, number>();
  const keyArgs: string[] = [];
  const shardKeys: string[] = [];
  const shardArgs: string[] = [];
  const markers: string[] = [];
  const items: string[] = [];
  let map = "";
  let g = 0;
  for (const [shard, list] of groups) {
    shardKeys.push(names.holds(shard), names.fence(shard));
    shardArgs.push(epochs[g++]!, String(list.length));
    for (const it of list) {
      let w = wallets.get(it.walletName);
      if (w === undefined) {
        wallets.set(it.walletName, (w = wallets.size + 1));
        walletKeys.push(it.walletName, names.rate(shard, it.wallet, window), names.rate(shard, it.wallet, window - 1));
      }
      let k = keys.get(it.apiKeyName);
      if (k === undefined) {
        keys.set(it.apiKeyName, (k = keys.size + 1));
        keyArgs.push(`${it.wallet}|${it.keyId}`, String(it.rpm));
      }
      map += String.fromCharCode(48 + w, 48 + k);
      markers.push(names.holdMarker(shard, it.holdId));
      items.push(it.holdId, String(it.amount));
    }
  }
  const argv = [limit, windowMs, now - window * windowMs, limits.holdTtlMs, minute, now - minute * 60_000].map(String);
  argv.push(String(groups.size), String(wallets.size), String(keys.size), map, ...shardArgs, ...keyArgs, ...items);
  return { keys: [...shardKeys, ...walletKeys, ...keys.keys(), ...markers], argv };
}

/** Whole numbers the scripts take: at most 15 digits, so a Lua double holds them (and their sums) exactly. */
const LIMIT = 1e15;

function whole(v: number): number {
  if (!Number.isSafeInteger(v) || v < 0 || v >= LIMIT) throw new Error("settle-batch: bad arguments");
  return v;
}

/** The charge event of a settle as settle-batch.lua's header says, without its ',"at":<ms>}' (the script adds it). */
export function chargeEvent(it: SettleItem): string {
  const cost = it.costMicro;
  if (!Number.isSafeInteger(cost) || Math.abs(cost) >= LIMIT || it.holdId === "") throw new Error("settle-batch: bad arguments");
  const [cr, cw, cw1h] = cacheSplit(it);
  const cache = cr + cw + cw1h === 0 ? "" : `,"cr":${cr},"cw":${cw},"cw1h":${cw1h}`;
  return (
    `{"type":"charge","hold":${JSON.stringify(it.holdId)},"wallet":${JSON.stringify(it.wallet)},"key":${whole(it.keyId)},` +
    `"model":${JSON.stringify(it.model)},"amount":${whole(it.charge)},"cost":${cost},"pt":${whole(it.promptTokens)},` +
    `"ct":${whole(it.completionTokens)}${cache}`
  );
}

/** A settle's cache split as the scripts take it: cache-read, 5-minute and 1-hour cache-write tokens. */
export function cacheSplit(it: SettleItem): [number, number, number] {
  return [whole(it.cachedPromptTokens ?? 0), whole(it.cacheWriteTokens ?? 0), whole(it.cacheWrite1hTokens ?? 0)];
}

/**
 * settle-batch.lua's KEYS and ARGV for one call: `groups` the call's items by shard (in their order), `epochs` each
 * shard's epoch. The wallets and keys of the batch go once each with the sums of their items (the script applies
 * them as they are when every hold is live), each item as its hold id and its charge event. Throws on a number
 * the script could not hold exactly (the script checks the counts and shapes, not each item's numbers).
 */
export function settleArgs(
  names: RedisNames,
  groups: Map<string, SettleItem[]>,
  epochs: string[],
  markerTtlS: number,
): { keys: string[]; argv: string[] } {
  const all = [...groups.values()].flat();
  const { wallets, keys, map } = sums(all);
  const { shardKeys, shardArgs } = shardParts(groups, epochs, (shard) => [names.holds(shard), names.outbox(shard), names.fence(shard)]);
  const argv = [String(markerTtlS), String(groups.size), String(wallets.size), String(keys.size), map, ...shardArgs];
  argv.push(...sumArgs(wallets, keys));
  for (const it of all) argv.push(it.holdId, chargeEvent(it));
  const markers = all.map((it) => names.holdMarker(it.shard, it.holdId));
  return { keys: [...shardKeys, ...wallets.keys(), ...keys.keys(), ...markers], argv };
}

/** A settle call's per-shard KEYS (`keysOf` each shard, in order) and ARGV (each shard's epoch and item count). */
function shardParts(
  groups: Map<string, SettleItem[]>,
  epochs: string[],
  keysOf: (shard: string) => string[],
): { shardKeys: string[]; shardArgs: string[] } {
  const shardKeys: string[] = [];
  const shardArgs: string[] = [];
  let g = 0;
  for (const [shard, list] of groups) {
    shardKeys.push(...keysOf(shard));
    shardArgs.push(epochs[g++]!, String(list.length));
  }
  return { shardKeys, shardArgs };
}

/**
 * The wallets and keys of a settle batch in first-seen order, with their items' sums (per wallet [index, charges];
 * per key [index, charges, requests, prompt tokens, completion tokens, revenue, cache reads, cache writes]) and
 * each item's wallet and key index as two bytes (48 + index).
 */
function sums(list: SettleItem[]): { wallets: Map<string, number[]>; keys: Map<string, number[]>; map: string } {
  const wallets = new Map<string, number[]>();
  const keys = new Map<string, number[]>();
  let map = "";
  for (const it of list) {
    const [cr, cw, cw1h] = cacheSplit(it);
    let w = wallets.get(it.walletName);
    if (!w) wallets.set(it.walletName, (w = [wallets.size + 1, 0]));
    w[1]! += it.charge;
    let k = keys.get(it.apiKeyName);
    if (!k) keys.set(it.apiKeyName, (k = [keys.size + 1, 0, 0, 0, 0, 0, 0, 0]));
    k[1]! += it.charge;
    k[2]! += 1;
    k[3]! += it.promptTokens;
    k[4]! += it.completionTokens;
    k[5]! += it.charge - it.costMicro;
    k[6]! += cr;
    k[7]! += cw + cw1h;
    map += String.fromCharCode(48 + w[0]!, 48 + k[0]!);
  }
  return { wallets, keys, map };
}

/** The sums as the scripts take them (includes/charges.lua): per wallet its charges, per key its 7 sums. */
function sumArgs(wallets: Map<string, number[]>, keys: Map<string, number[]>): string[] {
  const argv: string[] = [];
  for (const w of wallets.values()) argv.push(String(whole(w[1]!)));
  for (const k of keys.values()) {
    if (Math.abs(k[5]!) >= LIMIT) throw new Error("settle-batch: bad arguments");
    argv.push(String(whole(k[1]!)), String(k[2]), String(whole(k[3]!)), String(whole(k[4]!)), String(k[5]), String(whole(k[6]!)));
    argv.push(String(whole(k[7]!)));
  }
  return argv;
}

/** What a leased settle's lease gives up for it at most: the least of its charge and what it held of the lease. */
export function leaseTake(it: SettleItem): number {
  return Math.min(it.charge, it.held ?? 0);
}

/**
 * settle-leased-batch.lua's KEYS and ARGV for one call: `groups` the call's items by shard (in their order),
 * `epochs` each shard's epoch. Each wallet, key and lease of the batch goes once (the wallets and keys with their
 * items' sums, as settleArgs), each item as its charge id, what its lease gives up for it at most (leaseTake) and
 * its charge event.
 */
export function leasedSettleArgs(
  names: RedisNames,
  groups: Map<string, SettleItem[]>,
  epochs: string[],
  markerTtlS: number,
): { keys: string[]; argv: string[] } {
  const all = [...groups.values()].flat();
  const { wallets, keys, map: pairs } = sums(all);
  const { shardKeys, shardArgs } = shardParts(groups, epochs, (shard) => [names.outbox(shard), names.fence(shard)]);
  const leases = new Map<string, number>();
  const leaseKeys: string[] = [];
  const items: string[] = [];
  let map = "";
  all.forEach((it, i) => {
    let l = leases.get(it.lease!);
    if (l === undefined) {
      leases.set(it.lease!, (l = leases.size + 1));
      leaseKeys.push(names.holdMarker(it.shard, it.lease!));
    }
    map += pairs.slice(2 * i, 2 * i + 2) + String.fromCharCode(48 + l);
    items.push(it.holdId, String(whole(leaseTake(it))), chargeEvent(it));
  });
  const argv = [String(markerTtlS), map, String(groups.size), String(wallets.size), String(keys.size), String(leases.size)];
  argv.push(...shardArgs, ...sumArgs(wallets, keys), ...items);
  const markers = all.map((it) => names.holdMarker(it.shard, it.holdId));
  return { keys: [...shardKeys, ...wallets.keys(), ...keys.keys(), ...leaseKeys, ...markers], argv };
}
