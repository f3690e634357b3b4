import type { Ledger } from "../ledger/ledger.ts";
import { RebuildLockLost, type RebuildLock } from "./lock.ts";

// Far below Lua's unpack limit (~8,000 values) and short enough that one script call never stalls Redis.
const MAX_ARGS = 4_000;
const MAX_FIELDS_PER_OP = 1_000;

/**
 * A rebuild's writes into one shard, sent as rebuild-write-2.lua batches in the order they were queued. Each batch
 * lands only while the shard's fence is still what this rebuild left there (`R:<epoch>`, then `R:<epoch>:<n>` after
 * its n-th batch), checked by Redis in the same atomic step: a rebuild that stalled past its lock (another rebuilt
 * and opened the fences since) writes nothing and stops with RebuildLockLost, whatever its local view of the lock
 * says. The count in the fence chains the batches: a batch a failover lost leaves the fence behind, so no later
 * batch lands and the shard is never opened without it (`fence` is what the rebuild opens from).
 */
export class FencedShardWriter {
  private keys: string[] = [];
  private args: string[] = [];
  private batches = 0;

  constructor(
    private readonly ledger: Ledger,
    private readonly lock: RebuildLock,
    private readonly shard: string,
    private readonly closedFence: string,
  ) {}

  /** Queues HSET of `fields` on a hash of this shard. */
  async hset(key: string, fields: Record<string, string | number>): Promise<void> {
    const pairs = Object.entries(fields).flatMap(([f, v]) => [f, String(v)]);
    for (let i = 0; i < pairs.length; i += 2 * MAX_FIELDS_PER_OP)
      await this.queue(key, "HSET", pairs.slice(i, i + 2 * MAX_FIELDS_PER_OP), 2);
  }

  /** Queues HDEL of `fields` from a hash of this shard. */
  async hdel(key: string, fields: string[]): Promise<void> {
    for (let i = 0; i < fields.length; i += MAX_FIELDS_PER_OP) await this.queue(key, "HDEL", fields.slice(i, i + MAX_FIELDS_PER_OP), 1);
  }

  /** The shard's fence as this rebuild's last batch left it (the closed fence while none was sent). */
  get fence(): string {
    return this.batches === 0 ? this.closedFence : `${this.closedFence}:${this.batches}`;
  }

  /** Sends what is queued; throws RebuildLockLost when the fence is no longer what this rebuild left. */
  async flush(): Promise<void> {
    if (this.keys.length === 0) return;
    this.lock.assertHeld();
    const expected = this.fence;
    const next = `${this.closedFence}:${this.batches + 1}`;
    const key = this.ledger.names.fence(this.shard);
    const r = await this.ledger.scripts.rebuildWrite([key, ...this.keys], [expected, next, ...this.args]);
    this.keys = [];
    this.args = [];
    if (r[0] !== 1) {
      throw new RebuildLockLost(
        `shard ${this.shard}'s fence is "${r[2]}", not this rebuild's "${expected}": another process rebuilt the ledger, or a failover lost this rebuild's writes; this rebuild stops`,
      );
    }
    this.batches++;
  }

  private async queue(key: string, op: "HSET" | "HDEL", values: string[], width: number): Promise<void> {
    if (values.length === 0) return;
    if (this.args.length + values.length + 2 > MAX_ARGS) await this.flush();
    this.keys.push(key);
    this.args.push(op, String(values.length / width), ...values);
  }
}
