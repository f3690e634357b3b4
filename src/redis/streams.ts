/**
 * XREADGROUP replies as the gateway's Redis clients give them, read one way: Bun's client over RESP3, RESP2 lists,
 * and ioredis' flat form (the cluster router's fallback during a failover).
 */
export type StreamEntry = [id: string, fields: string[] | null];
/** Entries of several streams, each with its stream: [stream, entry id, fields (null: deleted)]. */
export type StreamBatch = [stream: string, id: string, fields: string[] | null][];
/**
 * The [stream, entries] pairs of an XREADGROUP reply: a map stream → entries over RESP3 (Bun's client), a list of
 * pairs over RESP2, or the flat `stream, entries, …` list ioredis' `call` makes of it (a cluster router falls back
 * to ioredis while a master fails over); null when nothing is there.
 */
export function streamPairs(reply: unknown): [string, StreamEntry[] | null][] {
  if (!reply) return [];
  if (!Array.isArray(reply)) return Object.entries(reply as Record<string, StreamEntry[] | null>);
  if (typeof reply[0] !== "string") return reply as [string, StreamEntry[] | null][];
  return Array.from({ length: reply.length / 2 }, (_, i) => [reply[2 * i] as string, reply[2 * i + 1] as StreamEntry[] | null]);
}

/** The entries of a many-stream XREADGROUP reply, each with its stream. */
export function streamEntriesOf(reply: unknown): StreamBatch {
  const out: StreamBatch = [];
  for (const [stream, entries] of streamPairs(reply)) for (const [id, fields] of entries ?? []) out.push([stream, id, fields]);
  return out;
}
