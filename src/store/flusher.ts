import { hostname } from "node:os";
import type { RedisClient } from "bun";
import type { RedisNames } from "../ledger/names.ts";
import { log } from "../log.ts";
import { metrics } from "../observe/metrics.ts";
import type { Sql } from "./db.ts";

const GROUP = "flusher";
const BATCH = 500;
// An entry another (crashed) consumer has held this long is taken over; inserts are idempotent anyway.
const CLAIM_IDLE_MS = 60_000;

type Entry = [id: string, fields: string[] | null];
// XREADGROUP over RESP3 (Bun's client): stream name → entries, or null when nothing is there.
type StreamReply = Record<string, Entry[]> | null;

/**
 * One statement per batch: the outbox entries are already JSON objects (settle-6 / release-6 write them), so the
 * batch goes to Postgres as a single json parameter, never parsed or re-serialised here.
 */
const INSERT_EVENTS = `
  INSERT INTO ledger_events (event_id, type, hold_id, wallet, api_key_id, model, amount_usdc, cost_usd_micro,
                             prompt_tokens, completion_tokens, occurred_at)
  SELECT e.type || ':' || e.hold, e.type, e.hold, e.wallet, e.key, e.model, e.amount, COALESCE(e.cost, 0),
         COALESCE(e.pt, 0), COALESCE(e.ct, 0), to_timestamp(e.at / 1000.0)
  FROM json_to_recordset($1::text::json) AS e(type text, hold text, wallet text, key bigint, model text, amount bigint,
                                        cost bigint, pt integer, ct integer, at bigint)
  ON CONFLICT (event_id) DO NOTHING`;

/** Inserts outbox events (their JSON texts) into ledger_events; idempotent by event id, so any redelivery is safe. */
export async function insertLedgerEvents(sql: Sql, events: string[]): Promise<void> {
  if (events.length > 0) await sql.unsafe(INSERT_EVENTS, [`[${events.join(",")}]`]);
}

/** The event JSON of an outbox entry's field list (`e <json>`); null for an entry deleted meanwhile. */
export function eventJson(fields: string[] | null): string | null {
  if (!fields) return null;
  for (let i = 0; i < fields.length; i += 2) if (fields[i] === "e") return fields[i + 1]!;
  return null;
}

/** What the flusher calls beside its own work. */
export interface FlusherHooks {
  /** Redis lost its data under us: rebuild the ledger from Postgres before flushing on. */
  onRedisLost?: () => Promise<unknown>;
}

/**
 * Moves ledger events from the per-shard Redis outbox streams into Postgres: read through a consumer group,
 * insert the batch in one transaction (ON CONFLICT DO NOTHING on the event id), and only after COMMIT
 * XACK + XDEL. A crash anywhere redelivers, never loses, and never double-counts. A full batch is followed by
 * the next one at once, so the outbox never grows faster than Postgres can take it.
 *
 * A Redis that lost its data while we run (NOGROUP) is noticed here: `onRedisLost` rebuilds the ledger from
 * Postgres and the consumer groups are created again.
 */
export class Flusher {
  private queue: Promise<unknown> = Promise.resolve();
  private timer?: ReturnType<typeof setTimeout>;
  private stopped = true;
  private rounds = 0;
  private readonly streams: string[];

  constructor(
    private readonly redis: RedisClient,
    private readonly sql: Sql,
    redisNames: RedisNames,
    private readonly hooks: FlusherHooks = {},
    private readonly consumer = `${hostname()}-${process.pid}`,
  ) {
    this.streams = redisNames.allShards().map((s) => redisNames.outbox(s));
  }

  /** Creates the consumer groups (from the start of each stream, so nothing written earlier is skipped). */
  async init(): Promise<void> {
    for (const s of this.streams) {
      await this.redis.send("XGROUP", ["CREATE", s, GROUP, "0", "MKSTREAM"]).catch((e: Error) => {
        if (!e.message.includes("BUSYGROUP")) throw e;
      });
    }
  }

  /** Runs in the background until stop(); every `intervalMs` it flushes what is there. */
  start(intervalMs = 200): void {
    this.stopped = false;
    const tick = async () => {
      let n = 0;
      try {
        n = await this.flushOnce();
      } catch (e) {
        metrics.flushFailures.inc();
        log.error("flusher round failed; it will retry", { error: e });
      }
      if (!this.stopped) this.timer = setTimeout(tick, n >= BATCH ? 0 : intervalMs);
    };
    this.timer = setTimeout(tick, intervalMs);
  }

  /** One batch (pending first, then new entries); serialised with every other caller. Returns entries handled. */
  flushOnce(): Promise<number> {
    const run = this.queue.then(() => this.round());
    this.queue = run.catch(() => {});
    return run;
  }

  /** Flushes until the outbox is empty: tests call it instead of sleeping, shutdown calls it last. */
  async drain(): Promise<void> {
    while ((await this.flushOnce()) > 0);
  }

  /** Stops the background loop and drains what is left. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.drain();
  }

  private async round(): Promise<number> {
    this.rounds++;
    let batch: [string, string, string[] | null][];
    try {
      batch = await this.read("0");
    } catch (e) {
      if (!(e instanceof Error && e.message.startsWith("NOGROUP"))) throw e;
      log.error("Redis lost the outbox consumer groups (data loss or FLUSHALL); rebuilding the ledger from Postgres");
      await this.hooks.onRedisLost?.();
      await this.init();
      batch = await this.read("0");
    }
    if (this.rounds % 50 === 0) batch = batch.concat(await this.claimStale());
    if (batch.length === 0) batch = await this.read(">");
    if (batch.length === 0) return 0;

    const events: string[] = [];
    for (const [, , fields] of batch) {
      const json = eventJson(fields);
      if (json) events.push(json);
    }
    await insertLedgerEvents(this.sql, events);
    const byStream = new Map<string, string[]>();
    for (const [stream, id] of batch) {
      const ids = byStream.get(stream);
      if (ids) ids.push(id);
      else byStream.set(stream, [id]);
    }
    const acks: Promise<unknown>[] = [];
    for (const [stream, ids] of byStream) {
      acks.push(this.redis.send("XACK", [stream, GROUP, ...ids]), this.redis.send("XDEL", [stream, ...ids]));
    }
    await Promise.all(acks);
    metrics.flushBatches.inc();
    metrics.flushEvents.inc(batch.length);
    return batch.length;
  }

  private async read(from: "0" | ">"): Promise<[string, string, string[] | null][]> {
    const reply = (await this.redis.send("XREADGROUP", [
      "GROUP", GROUP, this.consumer, "COUNT", String(BATCH), "STREAMS", ...this.streams, ...this.streams.map(() => from),
    ])) as StreamReply;
    const out: [string, string, string[] | null][] = [];
    for (const stream in reply ?? {}) for (const [id, fields] of reply![stream]!) out.push([stream, id, fields]);
    return out;
  }

  private async claimStale(): Promise<[string, string, string[] | null][]> {
    const out: [string, string, string[] | null][] = [];
    for (const s of this.streams) {
      const [, entries] = (await this.redis.send("XAUTOCLAIM", [s, GROUP, this.consumer, String(CLAIM_IDLE_MS), "0-0", "COUNT", String(BATCH)])) as [string, Entry[]];
      for (const [id, fields] of entries) out.push([s, id, fields]);
    }
    return out;
  }
}
