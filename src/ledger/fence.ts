import { ApiError } from "../errors.ts";
import { log } from "../log.ts";
import type { KeyRouter } from "../redis/router.ts";
import type { RedisNames } from "./names.ts";

/** A script reply: `{0, 'FENCED', fence}` is the refusal this module handles; anything else is the caller's. */
type Reply = [number, ...unknown[]];

const POLL_MS = 25;
// A rebuild of a large ledger takes seconds; a request waits that long rather than fail, but not forever.
const DEFAULT_WAIT_LIMIT_MS = 120_000;

/**
 * The epoch this process believes each shard's ledger is in, and what to do when a script refuses it.
 * Every balance-changing script checks `gw:{sNN}:fence` against the epoch it is given, so no process sharing the
 * Redis changes the ledger while a rebuild runs (fence "R:<epoch>"), and a process that missed a rebuild is
 * refused once and adopts the new epoch. The happy path stays one round trip per script call.
 */
export class LedgerFence {
  private readonly epochs = new Map<string, string>();
  private readonly waits = new Map<string, Promise<void>>();
  private rebuild?: () => Promise<unknown>;
  private rebuilding?: Promise<unknown>;

  constructor(
    private readonly client: KeyRouter,
    private readonly names: RedisNames,
    private readonly waitLimitMs = DEFAULT_WAIT_LIMIT_MS,
  ) {}

  /** The epoch to send with a script call on `shard`. */
  epoch(shard: string): string {
    return this.epochs.get(shard) ?? "";
  }

  /** Believes `epoch` for every shard (the rebuild that just opened them all calls this). */
  adoptAll(epoch: string): void {
    for (const s of this.names.allShards()) this.epochs.set(s, epoch);
  }

  /** Reads every shard's fence and believes the open ones (at start, after the ledger is ensured). */
  async readAll(): Promise<void> {
    const shards = this.names.allShards();
    const values = await Promise.all(shards.map((s) => this.readFence(s)));
    shards.forEach((s, i) => {
      if (isOpen(values[i])) this.epochs.set(s, values[i]!);
    });
  }

  /**
   * What runs when a shard has no fence (Redis lost its data) or is left closed with nobody holding the rebuild
   * lock (the rebuilder died): the rebuild from Postgres, which takes the lock itself.
   */
  onLost(rebuild: () => Promise<unknown>): void {
    this.rebuild = rebuild;
  }

  /**
   * Calls `script` with this process's epoch for `shard`; on a FENCED refusal waits until the shard is open again,
   * adopts its epoch and calls again. Nothing was changed by a refused call, so the retry is safe.
   */
  async run<R extends Reply>(shard: string, script: (epoch: string) => Promise<R>): Promise<R> {
    const deadline = Date.now() + this.waitLimitMs;
    for (;;) {
      const r = await script(this.epoch(shard));
      if (r[0] !== 0 || r[1] !== "FENCED") return r;
      const seen = String(r[2] ?? "");
      if (isOpen(seen)) {
        this.epochs.set(shard, seen);
        continue;
      }
      await this.waitOpen(shard, deadline);
    }
  }

  /**
   * `run` for a call that spans several shards (a batch on a single Redis): `script` gets each shard's epoch in
   * order; a FENCED refusal names the shard that refused (its 1-based place, the reply's 4th element), whose epoch
   * is adopted or waited for before the whole call goes again. Nothing was changed by a refused call.
   */
  async runMany<R extends Reply>(shards: string[], script: (epochs: string[]) => Promise<R>): Promise<R> {
    if (shards.length === 1) return this.run(shards[0]!, (epoch) => script([epoch]));
    const deadline = Date.now() + this.waitLimitMs;
    for (;;) {
      const r = await script(shards.map((s) => this.epoch(s)));
      if (r[0] !== 0 || r[1] !== "FENCED") return r;
      const shard = shards[Number(r[3]) - 1];
      if (shard === undefined) throw new Error(`a FENCED reply named no shard of the call: ${JSON.stringify(r)}`);
      const seen = String(r[2] ?? "");
      if (isOpen(seen)) {
        this.epochs.set(shard, seen);
        continue;
      }
      await this.waitOpen(shard, deadline);
    }
  }

  /** Whether a caller waits for a shard to open (a rebuild runs): its wait is bounded here, not by a Redis deadline. */
  get waiting(): boolean {
    return this.waits.size > 0;
  }

  /** The longest a caller waits for a closed shard before LedgerRebuilding. */
  get waitLimit(): number {
    return this.waitLimitMs;
  }

  /** One poll loop per shard, shared by every caller refused meanwhile. */
  private waitOpen(shard: string, deadline: number): Promise<void> {
    let wait = this.waits.get(shard);
    if (!wait) {
      wait = this.poll(shard, deadline).finally(() => this.waits.delete(shard));
      this.waits.set(shard, wait);
    }
    return wait;
  }

  private async poll(shard: string, deadline: number): Promise<void> {
    for (;;) {
      const fence = await this.readFence(shard);
      if (isOpen(fence)) {
        this.epochs.set(shard, fence!);
        return;
      }
      if (fence === null || Number(await this.client.send("EXISTS", [this.names.rebuildLock], this.names.rebuildLock)) === 0)
        await this.rebuildOnce();
      if (Date.now() > deadline) {
        throw new LedgerRebuilding("The ledger is being rebuilt; retry shortly");
      }
      await Bun.sleep(POLL_MS);
    }
  }

  /** On the master that owns the shard: a fence is checked where the shard's scripts run. */
  private readFence(shard: string): Promise<string | null> {
    const key = this.names.fence(shard);
    return this.client.send("GET", [key], key) as Promise<string | null>;
  }

  private async rebuildOnce(): Promise<void> {
    if (!this.rebuild) return;
    this.rebuilding ??= this.rebuild()
      .catch(async (e) => {
        log.error("ledger rebuild after a lost or abandoned fence failed; retrying", { error: e });
        await Bun.sleep(1_000);
      })
      .finally(() => (this.rebuilding = undefined));
    await this.rebuilding;
  }
}

/**
 * A shard stayed closed longer than a caller waits (a rebuild of a large ledger): nothing was changed; the client
 * retries after Retry-After (5 s): a 503 SERVICE_UNAVAILABLE.
 */
export class LedgerRebuilding extends ApiError {
  constructor(message: string) {
    super({ code: "SERVICE_UNAVAILABLE", message, headers: { "retry-after": "5" } });
  }
}

/** An open fence is the bare epoch (digits); "R:<epoch>" (":<n>" once a rebuild wrote n batches) is closed, null is lost. */
function isOpen(fence: string | null | undefined): boolean {
  return !!fence && /^\d+$/.test(fence);
}
