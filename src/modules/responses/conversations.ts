/**
 * The Responses API's conversation state: a stored response's whole conversation (its input items, earlier turns
 * resolved, then its output items) and each of its output items, in Redis beside the ledger for a bounded time
 * (RESPONSES_STORE_TTL_S), under the wallet's own key names, so `previous_response_id` and `item_reference`
 * resolve to what was said, and never to another wallet's. Billing is not involved: the provider bills the whole
 * conversation sent upstream, and the hold bounds it.
 */
import type { RedisNames } from "../../ledger/names.ts";
import type { RedisCommands } from "../../redis/connect.ts";
import type { Item } from "../../providers/responses/wire.ts";
import { StoredItemMissing } from "./errors.ts";

/** Stored responses and their items, per wallet. */
export class ConversationStore {
  constructor(
    private readonly redis: RedisCommands,
    private readonly names: RedisNames,
    private readonly ttlS: number,
  ) {}

  /**
   * The conversation a request continues, as items in order: the previous response's conversation (when named),
   * then this request's input with every `item_reference` replaced by the stored item, or dropped when the chain
   * already holds it (the AI SDK sends both). Unknown ids are StoredItemMissing (400 / 404).
   */
  async resolve(wallet: string, previousId: unknown, input: Item[]): Promise<Item[]> {
    const shard = this.names.shardOf(wallet);
    let chain: Item[] = [];
    if (previousId !== undefined && previousId !== null) {
      const stored = typeof previousId === "string" ? await this.redis.get(this.names.storedResponse(shard, wallet, previousId)) : null;
      if (stored === null) throw StoredItemMissing.response(String(previousId));
      chain = JSON.parse(stored) as Item[];
    }
    const refs = input.filter((i) => i?.type === "item_reference");
    if (refs.length === 0) return chain.length ? [...chain, ...input] : input;
    const inChain = new Set(chain.map((i) => i.id).filter(Boolean));
    const wanted = refs.map((r) => r.id).filter((id): id is string => typeof id === "string" && !inChain.has(id));
    const found = wanted.length ? await this.redis.mget(...wanted.map((id) => this.names.storedItem(shard, wallet, id))) : [];
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

  /** Keeps a response (its conversation then its output) and each output item, for the store's lifetime. */
  async save(wallet: string, responseId: string, conversation: Item[], output: Item[]): Promise<void> {
    const shard = this.names.shardOf(wallet);
    // One shard tag for all of them: one slot, so one MULTI on a Redis Cluster too.
    const tx = this.redis.multi();
    tx.set(this.names.storedResponse(shard, wallet, responseId), JSON.stringify([...conversation, ...output]), "EX", this.ttlS);
    for (const item of output) if (item.id) tx.set(this.names.storedItem(shard, wallet, item.id), JSON.stringify(item), "EX", this.ttlS);
    await tx.exec();
  }
}
