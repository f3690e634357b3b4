/**
 * The Responses API's conversation state: a stored response's whole conversation (its input items, earlier turns
 * resolved, then its output items) and each of its output items, in Redis beside the ledger for a bounded time
 * (RESPONSES_STORE_TTL_S), under the wallet's own key names, so `previous_response_id` and `item_reference`
 * resolve to what was said, and never to another wallet's. Billing is not involved: the provider bills the whole
 * conversation sent upstream, and the hold bounds it. What is stored is bounded (StoreLimits, docs/operating.md):
 * per item, per conversation, per wallet; inline data (data: URLs: images, files) is never stored.
 */
import { log } from "../../log.ts";
import type { RedisNames } from "../../ledger/names.ts";
import { LedgerScripts } from "../../ledger/scripts.ts";
import type { KeyRouter } from "../../redis/router.ts";
import { idSecond, type Item } from "../../providers/responses/wire.ts";
import { StoredItemMissing, StoreRefusal } from "./errors.ts";

/** The store's lifetime and bounds (RESPONSES_STORE_TTL_S, RESPONSES_STORE_MAX_*). */
export interface StoreLimits {
  ttlS: number;
  /** Most bytes of one item's JSON (an input item, an output item). */
  itemBytes: number;
  /** Most bytes of one stored conversation (earlier turns, the input, the output). */
  conversationBytes: number;
  /** Most bytes and responses one wallet stores within one lifetime (two windows of it: store-response-3.lua). */
  walletBytes: number;
  walletResponses: number;
}

/**
 * What an inline data: URL (an image, a file) is stored as: a base64 image is MBs billed as one image, so it is not
 * kept. A later turn that continues such a conversation by id is refused (400) and resends the conversation.
 */
const NOT_STORED = "gateway:inline-data-not-stored";

/** The item as stored: every string of its content parts that is a data: URL replaced by NOT_STORED. */
function withoutInlineData(item: Item): Item {
  const content = (item as { content?: unknown }).content;
  if (!Array.isArray(content)) return item;
  const parts = content.map((part: unknown) => {
    if (typeof part !== "object" || part === null) return part;
    const copy: Record<string, unknown> = { ...(part as Record<string, unknown>) };
    for (const [k, v] of Object.entries(copy)) if (typeof v === "string" && v.startsWith("data:")) copy[k] = NOT_STORED;
    return copy;
  });
  return { ...item, content: parts } as Item;
}

/** An item's JSON as stored: inline data left out (looked for only where the JSON has some). */
function storedJson(item: Item): string {
  const json = JSON.stringify(item);
  return json.includes('"data:') ? JSON.stringify(withoutInlineData(item)) : json;
}

/**
 * How long after the second an id was made a miss of it is read again. An answer leaves without waiting for its
 * conversation's write (queued on the wallet's connection first, so this process reads it in order), and a next
 * turn sent to another process the moment the answer is read can arrive before that write has been applied.
 */
const FRESH_MS = 3_000;

/** Whether a missing id may still be on its way: made by newId within FRESH_MS (and not claiming a later time). */
function fresh(id: string | undefined): boolean {
  const second = id === undefined ? undefined : idSecond(id);
  if (second === undefined) return false;
  const now = Date.now();
  return second * 1000 <= now + 1000 && now < second * 1000 + FRESH_MS;
}

/**
 * At most this many reads of one process wait for a fresh id at once; a miss beyond them is refused at once. A key
 * holder naming made-up fresh ids (before the rate limit, which admission applies) then costs a bounded number of
 * waiting requests and Redis reads, not one 3 s loop per request.
 */
export const MAX_WAITING_READS = 256;

/** The ledger's batches of a shard, which the store's writes ride with (Ledger.alongside, Ledger.flushShard). */
export interface Alongside {
  alongside(shard: string, put: () => void): void;
  flushShard(shard: string): void;
}

/**
 * Stored responses and their items, per wallet. On the ledger's hot-path connection (Bun's client, a third of
 * ioredis' CPU per call): writes and reads of one wallet go out on one connection to one slot, so a next turn's
 * read comes after the write queued before the previous answer was sent. A stream's writes go out with its settle
 * (`ledger`, `ride`): one write to Redis and one reply read for both, not a round trip of their own.
 */
export class ConversationStore {
  private readonly ttl: string;
  private readonly scripts: LedgerScripts;
  private waiting = 0;
  /** Wallets whose last store was refused for their bound, with when to try again (the next window). */
  private readonly full = new Map<string, number>();

  constructor(
    private readonly redis: KeyRouter,
    private readonly names: RedisNames,
    private readonly limits: StoreLimits,
    private readonly ledger: Alongside,
    private readonly maxWaiting = MAX_WAITING_READS,
  ) {
    this.ttl = String(limits.ttlS);
    // EVALSHA on the same connection, EVAL after a NOSCRIPT (the ledger's own instance loads the scripts).
    this.scripts = new LedgerScripts(redis);
  }

  /**
   * Before a request to be stored is served (nothing held yet): its conversation's items as they will be stored, or a
   * refusal (400) when one item, the conversation, or the wallet (known full in this process) is over its bound.
   */
  admit(wallet: string | undefined, items: Item[]): string[] {
    const { itemBytes, conversationBytes } = this.limits;
    const stored = items.map(storedJson);
    let total = 0;
    for (let i = 0; i < stored.length; i++) {
      const bytes = Buffer.byteLength(stored[i]!);
      if (bytes > itemBytes) throw StoreRefusal.item(i, bytes, itemBytes);
      total += bytes + 1;
    }
    if (total > conversationBytes) throw StoreRefusal.conversation(total, conversationBytes);
    if (wallet !== undefined) {
      const until = this.full.get(wallet);
      if (until !== undefined && Date.now() < until) throw StoreRefusal.wallet(this.limits);
      if (until !== undefined) this.full.delete(wallet);
    }
    return stored;
  }

  /**
   * The conversation a request continues, as items in order: the previous response's conversation (when named),
   * then this request's input with every `item_reference` replaced by the stored item, or dropped when the chain
   * already holds it (the AI SDK sends both). Unknown ids are StoredItemMissing (400 / 404).
   */
  async resolve(wallet: string, previousId: unknown, input: Item[]): Promise<Item[]> {
    const shard = this.names.shardOf(wallet);
    // Writes of this wallet still waiting to ride with a settle go first: this read comes after them.
    this.ledger.flushShard(shard);
    let chain: Item[] = [];
    if (previousId !== undefined && previousId !== null) {
      const key = typeof previousId === "string" ? this.names.storedResponse(shard, wallet, previousId) : undefined;
      const stored = key === undefined ? undefined : (await this.read([previousId as string], [key]))[0];
      if (typeof stored !== "string") throw StoredItemMissing.response(String(previousId));
      if (stored.includes(NOT_STORED)) throw StoreRefusal.inlineData(previousId as string);
      chain = JSON.parse(stored) as Item[];
    }
    const refs = input.filter((i) => i?.type === "item_reference");
    if (refs.length === 0) return chain.length ? [...chain, ...input] : input;
    const inChain = new Set(chain.map((i) => i.id).filter(Boolean));
    const wanted = refs.map((r) => r.id).filter((id): id is string => typeof id === "string" && !inChain.has(id));
    const keys = wanted.map((id) => this.names.storedItem(shard, wallet, id));
    const found = keys.length ? await this.read(wanted, keys) : [];
    const byId = new Map(wanted.map((id, n) => [id, found[n]]));
    const items: Item[] = [...chain];
    for (const item of input) {
      if (item?.type !== "item_reference") {
        items.push(item);
        continue;
      }
      if (typeof item.id === "string" && inChain.has(item.id)) continue;
      const stored = typeof item.id === "string" ? byId.get(item.id) : null;
      if (!stored) throw StoredItemMissing.item(String(item.id));
      items.push(JSON.parse(stored) as Item);
    }
    return items;
  }

  /** The stored values of `keys` (one slot), a miss read again, briefly, while its id is fresh. */
  private async read(ids: string[], keys: string[]): Promise<(string | null)[]> {
    const once = async () =>
      keys.length === 1
        ? [(await this.redis.send("GET", keys, keys[0])) as string | null]
        : ((await this.redis.send("MGET", keys, keys[0])) as (string | null)[]);
    let found = await once();
    const missesFresh = () => found.some((v, n) => typeof v !== "string" && fresh(ids[n]));
    if (this.waiting >= this.maxWaiting || !missesFresh()) return found;
    this.waiting++;
    try {
      for (let wait = 2; missesFresh(); wait = Math.min(wait * 2, 250)) {
        await Bun.sleep(wait);
        found = await once();
      }
    } finally {
      this.waiting--;
    }
    return found;
  }

  /**
   * Keeps a response (its conversation, as `admit` gave it, then its output) and each output item, for the store's
   * lifetime, unless that passes a bound: the conversation's or an output item's (the answer is then only not
   * stored), or the wallet's (store-response-3.lua writes nothing, and this process refuses the wallet's next
   * stores until the next window). `outputJson` is each output item's JSON as the client read it, written as it is.
   * With `ride`, the write leaves with the wallet's shard's next settle (the answer's own, queued before this) or
   * now, and a read of the store sends it first; without, now. The promise says whether Redis took it.
   */
  save(wallet: string, responseId: string, conversation: string[], output: Item[], outputJson: string[], ride = false): Promise<unknown> {
    const shard = this.names.shardOf(wallet);
    const { itemBytes, conversationBytes, walletBytes, walletResponses, ttlS } = this.limits;
    const whole = `[${[...conversation, ...outputJson].join(",")}]`;
    if (Buffer.byteLength(whole) > conversationBytes || outputJson.some((j) => Buffer.byteLength(j) > itemBytes)) {
      log.warn("responses: conversation over the store's bound, not stored", { response_id: responseId });
      return Promise.resolve(false);
    }
    const windowMs = ttlS * 1000;
    const window = Math.floor(Date.now() / windowMs);
    const keys = [
      this.names.storeUsage(shard, wallet, window),
      this.names.storeUsage(shard, wallet, window - 1),
      this.names.storedResponse(shard, wallet, responseId),
    ];
    const values = [whole];
    for (let i = 0; i < output.length; i++) {
      const id = output[i]!.id;
      if (!id) continue;
      keys.push(this.names.storedItem(shard, wallet, id));
      values.push(outputJson[i]!);
    }
    // One shard tag for all of them: one slot, so one connection on a Redis Cluster too.
    const put = async () => {
      const r = await this.scripts.storeResponse(keys, [this.ttl, walletBytes, walletResponses, ...values]);
      if (r[0] === 1) return true;
      if (this.full.size >= 100_000) this.full.clear();
      this.full.set(wallet, (window + 1) * windowMs);
      log.warn("responses: the wallet's stored conversations are at their bound; not stored", { response_id: responseId });
      return false;
    };
    if (!ride) return put();
    return new Promise((resolve, reject) => this.ledger.alongside(shard, () => void put().then(resolve, reject)));
  }
}
