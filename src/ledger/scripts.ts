import { type KeyRouter, SingleRouter } from "../redis/router.ts";
import audit from "../../lua/audit-3.lua" with { type: "text" };
import compareAndSet from "../../lua/compare-and-set-1.lua" with { type: "text" };
import countRequest from "../../lua/count-request-3.lua" with { type: "text" };
import credit from "../../lua/credit-3.lua" with { type: "text" };
import creditSettle from "../../lua/credit-settle-3.lua" with { type: "text" };
import lease from "../../lua/lease-8.lua" with { type: "text" };
import rebuildWrite from "../../lua/rebuild-write-2.lua" with { type: "text" };
import release from "../../lua/release-6.lua" with { type: "text" };
import reserveBatch from "../../lua/reserve-batch.lua" with { type: "text" };
import settleBatch from "../../lua/settle-batch.lua" with { type: "text" };
import settleLeasedBatch from "../../lua/settle-leased-batch.lua" with { type: "text" };
import storeResponse from "../../lua/store-response-3.lua" with { type: "text" };
import chargesInclude from "../../lua/includes/charges.lua" with { type: "text" };
import fenceInclude from "../../lua/includes/fence.lua" with { type: "text" };
import numbersInclude from "../../lua/includes/numbers.lua" with { type: "text" };
import walletsInclude from "../../lua/includes/wallets.lua" with { type: "text" };

// Imported as text so a compiled binary carries them; the key count comes from the `name-<numKeys>.lua` name, or
// from each call for a variadic `name-batch.lua`.
const FILES = {
  "reserve-batch.lua": reserveBatch,
  "settle-batch.lua": settleBatch,
  "settle-leased-batch.lua": settleLeasedBatch,
  "lease-8.lua": lease,
  "release-6.lua": release,
  "credit-3.lua": credit,
  "credit-settle-3.lua": creditSettle,
  "compare-and-set-1.lua": compareAndSet,
  "count-request-3.lua": countRequest,
  "audit-3.lua": audit,
  "rebuild-write-2.lua": rebuildWrite,
  "store-response-3.lua": storeResponse,
} as const;

/** Code shared by several scripts (lua/includes/), pulled in where a script says `--- @include "includes/<name>"`. */
const INCLUDES: Record<string, string> = {
  "includes/charges": chargesInclude,
  "includes/fence": fenceInclude,
  "includes/numbers": numbersInclude,
  "includes/wallets": walletsInclude,
};

/** A script's file text with each `--- @include "…"` line replaced by that include's code (Redis has no imports). */
export function withIncludes(text: string): string {
  return text.replace(/^--- @include "([^"]+)"\n/gm, (_line, name: string) => {
    const code = INCLUDES[name];
    if (code === undefined) throw new Error(`lua: unknown include "${name}"`);
    return code;
  });
}

const SOURCES = Object.fromEntries(Object.entries(FILES).map(([file, text]) => [file, withIncludes(text)])) as Record<
  keyof typeof FILES,
  string
>;

/** The ledger's Lua scripts by file name. */
export const SCRIPT_FILES = Object.keys(FILES) as (keyof typeof FILES)[];

/** A script as Redis runs it, includes in place (tests pin its SHA1). */
export function scriptSource(file: keyof typeof FILES): string {
  return SOURCES[file];
}

/** The script's file as written, before its includes are pulled in. */
export function scriptFile(file: keyof typeof FILES): string {
  return FILES[file];
}

type Arg = string | number;

/** One reserve of a batch: held `{1, available, rate_remaining}`, or `{0, reason, detail?}`. */
export type ReserveItemReply = [number, number | string, (number | string)?, string?];
/** One settle of a batch: charged `{1}` (`{1, covered}` for a leased one), or `{0, state}`. */
export type SettleItemReply = [number, (number | string)?, number?];
/** A batch script's reply: one reply per item in order, or the whole batch refused by the fence of its shard g (the 4th element; a batch may span shards). */
export type BatchReply<T> = [1, ...T[]] | [0, "FENCED", string, number?];

interface Script {
  sha: string;
  source: string;
  numKeys: number;
}

function script(file: keyof typeof FILES): Script {
  const source = scriptSource(file);
  return {
    sha: new Bun.CryptoHasher("sha1").update(source).digest("hex"),
    source,
    numKeys: Number(/-(\d+)\.lua$/.exec(file)?.[1] ?? 0),
  };
}

/**
 * Runs the ledger scripts where their shard lives (KeyRouter: Bun's native client on one Redis, or per cluster
 * master). The chat path makes two script calls per request (batched per shard: batcher.ts); EVALSHA first, EVAL on NOSCRIPT, so a restarted or
 * flushed Redis needs no reload step.
 */
export class LedgerScripts {
  private readonly scripts = {
    reserveBatch: script("reserve-batch.lua"),
    settleBatch: script("settle-batch.lua"),
    settleLeasedBatch: script("settle-leased-batch.lua"),
    lease: script("lease-8.lua"),
    release: script("release-6.lua"),
    credit: script("credit-3.lua"),
    creditSettle: script("credit-settle-3.lua"),
    compareAndSet: script("compare-and-set-1.lua"),
    countRequest: script("count-request-3.lua"),
    audit: script("audit-3.lua"),
    rebuildWrite: script("rebuild-write-2.lua"),
    storeResponse: script("store-response-3.lua"),
  };

  constructor(readonly client: KeyRouter) {}

  /** Connects to a Redis URL or unix socket path (one Redis); reconnects by itself after Redis restarts. */
  static async connect(target: string | KeyRouter): Promise<LedgerScripts> {
    const scripts = new LedgerScripts(typeof target === "string" ? SingleRouter.open(target) : target);
    await scripts.load();
    return scripts;
  }

  /**
   * SCRIPT LOAD of every script on every master, now and on each reconnect (a restarted Redis lost its script
   * cache), so the EVALSHA fallback stays rare. (It re-sends as EVAL after the NOSCRIPT reply, behind commands
   * queued meanwhile.)
   */
  async load(): Promise<void> {
    await this.client.onConnect((send) => Promise.all(Object.values(this.scripts).map((s) => send("SCRIPT", ["LOAD", s.source]))));
  }

  /** reserve-batch.lua: {1, ...one {1, available, rate_remaining} | {0, reason, detail?} per item} | {0, 'FENCED', fence}. */
  reserveBatch(keys: string[], argv: Arg[]): Promise<BatchReply<ReserveItemReply>> {
    return this.runVariadic(this.scripts.reserveBatch, keys, argv) as Promise<BatchReply<ReserveItemReply>>;
  }

  /** settle-batch.lua (ARGV: batchArgs.ts settleArgs): {2} every item charged | {1, ...one {1} | {0, state} per item} | {0, 'FENCED', fence}. */
  settleBatch(keys: string[], argv: Arg[]): Promise<BatchReply<SettleItemReply> | [2]> {
    return this.runVariadic(this.scripts.settleBatch, keys, argv) as Promise<BatchReply<SettleItemReply> | [2]>;
  }

  /** settle-leased-batch.lua (ARGV: batchArgs.ts leasedSettleArgs): {2} every item charged | {1, ...one {1, covered} | {0, state} per item} | {0, 'FENCED', fence}. */
  settleLeasedBatch(keys: string[], argv: Arg[]): Promise<BatchReply<SettleItemReply> | [2]> {
    return this.runVariadic(this.scripts.settleLeasedBatch, keys, argv) as Promise<BatchReply<SettleItemReply> | [2]>;
  }

  /**
   * lease-8.lua: {1, locked, available_after, slots, before, rate_left} | {0, 'UNAUTHORIZED', locked, before} | {0, 'HOLD_RESOLVED'} |
   * {0, 'FENCED', fence}. `args` are ARGV[1..14] in the script's order.
   */
  lease(keys: string[], args: Arg[]): Promise<[number, ...(number | string)[]]> {
    return this.run(this.scripts.lease, [...keys, ...args]) as Promise<[number, ...(number | string)[]]>;
  }

  /** release-6.lua: {1, amount_released} | {0, state} | {0, 'FENCED', fence}. */
  release(
    keys: string[],
    epoch: string,
    holdId: string,
    kind: "release" | "expire",
    markerTtlS: number,
  ): Promise<[number, number | string, string?]> {
    return this.run(this.scripts.release, [...keys, epoch, holdId, kind, markerTtlS]) as Promise<[number, number | string, string?]>;
  }

  /** credit-3.lua: {1 | 0, balance} | {0, 'FENCED', fence}. */
  credit(
    keys: [wallet: string, credited: string, fence: string],
    epoch: string,
    creditId: string,
    amount: number | string,
  ): Promise<[number, number | string, string?]> {
    return this.run(this.scripts.credit, [...keys, epoch, creditId, amount]) as Promise<[number, number | string, string?]>;
  }

  /** credit-settle-3.lua: {1 | 0, balance} | {0, 'UNKNOWN'} | {0, 'FENCED', fence}. */
  creditSettle(
    keys: [wallet: string, credited: string, fence: string],
    epoch: string,
    creditId: string,
    amount: number | string,
  ): Promise<[number, number | string, string?]> {
    return this.run(this.scripts.creditSettle, [...keys, epoch, creditId, amount]) as Promise<[number, number | string, string?]>;
  }

  /** compare-and-set-1.lua: true when `key` held `expected` and now holds `next` ('' deletes it). */
  async compareAndSet(key: string, expected: string, next: string, ttlMs?: number): Promise<boolean> {
    return (await this.run(this.scripts.compareAndSet, [key, expected, next, ttlMs === undefined ? "" : ttlMs])) === 1;
  }

  /** count-request-3.lua: {1, rate_remaining} | {0, 'UNAUTHORIZED'} | {0, 'RATE_LIMITED', retry_after_ms}. */
  countRequest(keys: [apiKey: string, rateNow: string, ratePrev: string], limit: number, windowMs: number, elapsedMs: number) {
    return this.run(this.scripts.countRequest, [...keys, limit, windowMs, elapsedMs]) as Promise<[number, number | string, number?]>;
  }

  /** audit-3.lua (read only): one shard's books as of one instant, for `admin audit`; its key count varies. */
  audit(keys: string[], argv: Arg[]): Promise<unknown[]> {
    return this.runVariadic(this.scripts.audit, keys, argv) as Promise<unknown[]>;
  }

  /** rebuild-write-2.lua: one fenced batch of a rebuild into one shard; its key count varies. */
  rebuildWrite(keys: string[], argv: Arg[]): Promise<[1, number] | [0, "FENCED", string]> {
    return this.runVariadic(this.scripts.rebuildWrite, keys, argv) as Promise<[1, number] | [0, "FENCED", string]>;
  }

  /**
   * store-response-3.lua: {1, bytes, count} stored | {0, 'FULL', bytes, count}; `keys` are its 3 and one per output
   * item, `argv` its lifetime, bounds and values.
   */
  storeResponse(keys: string[], argv: Arg[]): Promise<[number, number | string, ...number[]]> {
    return this.runVariadic(this.scripts.storeResponse, keys, argv) as Promise<[number, number | string, ...number[]]>;
  }

  close(): void {
    this.client.close();
  }

  /** A script whose key count comes with each call (the batches, the audit's read, a rebuild's write). */
  private runVariadic(s: Script, keys: string[], argv: Arg[]): Promise<unknown> {
    return this.run({ ...s, numKeys: keys.length }, [...keys, ...argv]);
  }

  private async run(s: Script, keysThenArgs: Arg[]): Promise<unknown> {
    const args = [s.sha, String(s.numKeys)];
    for (const a of keysThenArgs) args.push(typeof a === "string" ? a : String(a));
    // Every key of a script shares one hash tag: the first one says where it runs.
    const route = s.numKeys > 0 ? args[2] : undefined;
    try {
      return await this.client.send("EVALSHA", args, route);
    } catch (e) {
      if (!(e instanceof Error) || !e.message.startsWith("NOSCRIPT")) throw e;
      args[0] = s.source;
      return this.client.send("EVAL", args, route);
    }
  }
}
