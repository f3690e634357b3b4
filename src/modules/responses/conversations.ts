/**
 * The Responses API's conversation state: a stored response's whole conversation (its input items, earlier turns
 * resolved, then its output items) and each of its output items, in Redis beside the ledger for a bounded time
 * (RESPONSES_STORE_TTL_S), under the wallet's own key names, so `previous_response_id` and `item_reference`
 * resolve to what was said, and never to another wallet's. Billing is not involved: the provider bills the whole
 * conversation sent upstream, and the hold bounds it.
 */
import type { RedisNames } from "../../ledger/names.ts";
import type { KeyRouter } from "../../redis/router.ts";
import { idSecond, type Item } from "../../providers/responses/wire.ts";
import { StoredItemMissing } from "./errors.ts";

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

  private waiting = 0;

  constructor(
    private readonly redis: KeyRouter,
    private readonly names: RedisNames,
    ttlS: number,
    private readonly ledger: Alongside,
    private readonly maxWaiting = MAX_WAITING_READS,
  ) {
    this.ttl = String(ttlS);
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
   * Keeps a response (its conversation then its output) and each output item, for the store's lifetime.
   * `outputJson` is each output item's JSON as the client read it, written as it is. With `ride`, the writes leave
   * with the wallet's shard's next settle (the answer's own, queued before this) or now, and a read of the store
   * sends them first; without, now. The promise says whether Redis took them.
   */
  save(wallet: string, responseId: string, conversation: Item[], output: Item[], outputJson: string[], ride = false): Promise<unknown> {
    const shard = this.names.shardOf(wallet);
    const items = outputJson.join(",");
    const past = conversation.length ? JSON.stringify(conversation).slice(1, -1) : "";
    const whole = `[${past}${past && items ? "," : ""}${items}]`;
    const key = this.names.storedResponse(shard, wallet, responseId);
    const put = () => {
      // One shard tag for all of them: one slot, so one connection on a Redis Cluster too.
      const writes = [this.redis.send("SET", [key, whole, "EX", this.ttl], key)];
      for (let i = 0; i < output.length; i++) {
        const id = output[i]!.id;
        if (!id) continue;
        const itemKey = this.names.storedItem(shard, wallet, id);
        writes.push(this.redis.send("SET", [itemKey, outputJson[i]!, "EX", this.ttl], itemKey));
      }
      return Promise.all(writes);
    };
    if (!ride) return put();
    return new Promise((resolve, reject) => this.ledger.alongside(shard, () => void put().then(resolve, reject)));
  }
}
