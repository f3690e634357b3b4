import { hostname } from "node:os";
import type { RedisNames } from "../ledger/names.ts";
import { log } from "../log.ts";
import { metrics } from "../observe/metrics.ts";
import { outageOf } from "../outage.ts";
import type { KeyRouter } from "../redis/router.ts";
import { type StreamBatch, type StreamEntry, streamEntriesOf, streamPairs } from "../redis/streams.ts";
import type { Sql } from "./db.ts";

const GROUP = "flusher";
const BATCH = 500;
// An entry another (crashed) consumer has held this long is taken over; inserts are idempotent anyway.
const CLAIM_IDLE_MS = 60_000;

/** A ledger event's id in Postgres: `<type>:<hold id>`; the insert builds the same (EVENT_ID_SQL) from the raw JSON. */
export const ledgerEventId = (type: string, hold: string) => `${type}:${hold}`;
const EVENT_ID_SQL = "e.type || ':' || e.hold";

const INSERT_EVENTS = `
  INSERT INTO ledger_events (event_id, type, hold_id, wallet, api_key_id, model, amount_usdc, cost_usd_micro,
                             prompt_tokens, completion_tokens, cached_prompt_tokens, cache_write_tokens,
                             cache_write_1h_tokens, occurred_at)
  SELECT ${EVENT_ID_SQL}, e.type, e.hold, e.wallet, e.key, e.model, e.amount, COALESCE(e.cost, 0),
         COALESCE(e.pt, 0), COALESCE(e.ct, 0), COALESCE(e.cr, 0), COALESCE(e.cw, 0), COALESCE(e.cw1h, 0),
         to_timestamp(e.at / 1000.0)
  FROM json_to_recordset($1::text::json) AS e(type text, hold text, wallet text, key bigint, model text, amount bigint,
                                        cost bigint, pt integer, ct integer, cr integer, cw integer, cw1h integer,
                                        at bigint)
  ON CONFLICT (event_id) DO NOTHING`;

// The JSON one insert carries at most (an entry larger than this goes alone). A round reads up to BATCH entries of
// each shard (24,000 with 48 shards: ~5 MiB of JSON after a backlog); Postgres holds several times a statement's
// parameter while it runs it, and under PGlite that memory is WebAssembly's, touched once and never given back:
// one 5 MiB insert left the embedded Postgres ~40 MiB larger for good, 256 KiB ones ~4 (docs/benchmarks.md, "Memory").
// A usual round (a few hundred events) is one statement either way.
const INSERT_MAX_JSON = 256 * 1024;

/**
 * Inserts outbox events (their JSON texts) into ledger_events; idempotent by event id, so any redelivery is safe
 * (a batch cut into several statements too: one written before a crash is skipped when the batch comes again).
 * The entries are JSON already (settle-batch / release-6 write them), passed as one parameter per statement.
 */
export async function insertLedgerEvents(sql: Sql, events: string[]): Promise<void> {
  for (let i = 0; i < events.length;) {
    let size = events[i]!.length;
    let end = i + 1;
    while (end < events.length && size + events[end]!.length < INSERT_MAX_JSON) size += events[end++]!.length + 1;
    await sql.unsafe(INSERT_EVENTS, [`[${events.slice(i, end).join(",")}]`]);
    i = end;
  }
}

/** An outbox entry's events (`e <json>`): one JSON object or a settle batch's, comma-separated; null if deleted. */
export function eventJson(fields: string[] | null): string | null {
  if (!fields) return null;
  for (let i = 0; i < fields.length; i += 2) if (fields[i] === "e") return fields[i + 1]!;
  return null;
}

/** What the flusher calls beside its own work. */
export interface FlusherHooks {
  /** Redis lost its data under us: rebuild the ledger from Postgres before flushing on. */
  onRedisLost?: () => Promise<unknown>;
  /** Sends ledger calls still queued in this process (ledger/batcher.ts): a drain then sees every answer's charge. */
  beforeDrain?: () => void;
}

/**
 * Moves ledger events from the per-shard Redis outbox streams into Postgres: read through a consumer group,
 * insert the batch (ON CONFLICT DO NOTHING on the event id; one statement, or a few for a large backlog), and only
 * after every insert committed XACK + XDEL. A crash anywhere redelivers, never loses, and never double-counts. A full batch is followed by
 * the next one at once, so the outbox never grows faster than Postgres can take it.
 *
 * Every gateway process runs one: the consumer group gives each entry to one reader, a reader that dies holding
 * entries has them claimed by another after CLAIM_IDLE_MS, and inserts are idempotent by event id, so N processes
 * flush each charge into Postgres exactly once. Each shard's stream is read on its own (one slot per command, on
 * the master that owns it), all shards' reads in flight together.
 *
 * A Redis that lost its data while we run (NOGROUP) is noticed here: `onRedisLost` rebuilds the ledger from
 * Postgres and the consumer groups are created again.
 */
export class Flusher {
  private queue: Promise<unknown> = Promise.resolve();
  private timer?: ReturnType<typeof setTimeout>;
  private stopped = true;
  private rounds = 0;
  /** This reader may hold entries it read but did not ack (at start: a previous run under the same name). */
  private ownPending = true;
  private readonly streams: string[];

  constructor(
    private readonly redis: KeyRouter,
    private readonly sql: Sql,
    redisNames: RedisNames,
    private readonly hooks: FlusherHooks = {},
    private readonly consumer = `${hostname()}-${process.pid}`,
  ) {
    this.streams = redisNames.allShards().map((s) => redisNames.outbox(s));
  }

  /** Creates the consumer groups (from the start of each stream, so nothing written earlier is skipped). */
  async init(): Promise<void> {
    await Promise.all(
      this.streams.map((s) =>
        this.redis.send("XGROUP", ["CREATE", s, GROUP, "0", "MKSTREAM"], s).catch((e: Error) => {
          if (!e.message.includes("BUSYGROUP")) throw e;
        }),
      ),
    );
  }

  /** Runs in the background until stop(); every `intervalMs` it flushes what is there. */
  start(intervalMs = 200): void {
    this.stopped = false;
    let failed = 0; // rounds failed in a row: one line when it starts and one when it ends, not one per round
    const tick = async () => {
      let n = 0;
      try {
        n = await this.flushOnce();
        if (failed > 0) log.info("flusher rounds succeed again", { failed_rounds: failed });
        failed = 0;
      } catch (e) {
        metrics.flushFailures.inc();
        // A dependency down is an outage the entries wait out in Redis (a warning); anything else is a defect.
        if (failed++ === 0) (outageOf(e) ? log.warn : log.error)("flusher round failed; it will retry", { error: e });
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

  /**
   * One batch that first takes over what other readers have held for `minIdleMs` or longer (a process killed
   * mid-flush), instead of waiting for the every-50th-round claim of entries idle CLAIM_IDLE_MS.
   */
  takeOver(minIdleMs: number): Promise<number> {
    const run = this.queue.then(() => this.round(minIdleMs));
    this.queue = run.catch(() => {});
    return run;
  }

  /** Flushes until the outbox is empty: tests call it instead of sleeping, shutdown calls it last. */
  async drain(): Promise<void> {
    this.hooks.beforeDrain?.();
    while ((await this.flushOnce()) > 0);
  }

  /** Stops the background loop and drains what is left. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.drain();
  }

  private async round(claimIdleMs?: number): Promise<number> {
    this.rounds++;
    let batch: StreamBatch;
    try {
      batch = await this.next(claimIdleMs);
    } catch (e) {
      if (!(e instanceof Error && e.message.startsWith("NOGROUP"))) throw e;
      log.error("Redis lost the outbox consumer groups (data loss or FLUSHALL); rebuilding the ledger from Postgres");
      await this.hooks.onRedisLost?.();
      await this.init();
      this.ownPending = true;
      batch = await this.next(claimIdleMs);
    }
    if (batch.length === 0) return 0;
    // Until this batch is acked, what this reader holds is read again first (a failed insert or ack retries it).
    const wasPending = this.ownPending;
    this.ownPending = true;

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
      acks.push(this.redis.send("XACK", [stream, GROUP, ...ids], stream), this.redis.send("XDEL", [stream, ...ids], stream));
    }
    await Promise.all(acks);
    this.ownPending = wasPending;
    metrics.flushBatches.inc();
    metrics.flushEvents.inc(batch.length);
    return batch.length;
  }

  /**
   * The next batch: entries this reader read before and has not acked (only after a failed round or at start, so
   * an idle round costs one read per shard), stale entries of dead readers every 50 rounds, else new entries.
   */
  private async next(claimIdleMs?: number): Promise<StreamBatch> {
    let batch: StreamBatch = [];
    if (this.ownPending) {
      batch = await this.read("0");
      if (batch.length === 0) this.ownPending = false;
    }
    if (claimIdleMs !== undefined || this.rounds % 50 === 0) batch = batch.concat(await this.claimStale(claimIdleMs));
    if (batch.length === 0) batch = await this.read(">");
    return batch;
  }

  /**
   * Up to BATCH entries of each shard's stream: on one Redis one XREADGROUP naming every stream (one read per shard
   * and round cost the gateway ~70 µs per request, docs/benchmarks.md); on a cluster, which refuses keys of several
   * slots in one command, one read per stream on its own master, all in flight together.
   */
  private async read(from: "0" | ">"): Promise<StreamBatch> {
    const count = String(BATCH);
    if (this.redis.multiSlot) {
      const reply = await this.redis.send("XREADGROUP", [
        "GROUP",
        GROUP,
        this.consumer,
        "COUNT",
        count,
        "STREAMS",
        ...this.streams,
        ...this.streams.map(() => from),
      ]);
      return streamEntriesOf(reply);
    }
    const replies = await Promise.all(
      this.streams.map((s) => this.redis.send("XREADGROUP", ["GROUP", GROUP, this.consumer, "COUNT", count, "STREAMS", s, from], s)),
    );
    const out: StreamBatch = [];
    replies.forEach((reply, i) => {
      for (const [, entries] of streamPairs(reply)) for (const [id, fields] of entries ?? []) out.push([this.streams[i]!, id, fields]);
    });
    return out;
  }

  /** Takes over entries another reader has held for `minIdleMs` or longer (a process that died mid-flush). */
  private async claimStale(minIdleMs = CLAIM_IDLE_MS): Promise<StreamBatch> {
    const replies = await Promise.all(
      this.streams.map(
        (s) =>
          this.redis.send("XAUTOCLAIM", [s, GROUP, this.consumer, String(minIdleMs), "0-0", "COUNT", String(BATCH)], s) as Promise<
            [string, StreamEntry[]]
          >,
      ),
    );
    const out: StreamBatch = [];
    replies.forEach(([, entries], i) => {
      for (const [id, fields] of entries) out.push([this.streams[i]!, id, fields]);
    });
    return out;
  }
}
