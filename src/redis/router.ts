import { RedisClient } from "bun";

/** A command sent on one connection (a master's, when loading scripts on each). */
export type Send = (command: string, args: string[]) => Promise<unknown>;

/**
 * The ledger's hot-path connection: sends a command to the Redis that holds its key (the one Redis, or the master
 * that owns the key's slot in a cluster). Lua scripts, fences and the outbox go through it.
 */
export interface KeyRouter {
  /** Sends `command` where `key` lives; without a key, to any master. */
  send(command: string, args: string[], key?: string): Promise<unknown>;
  /** Runs `load` on each master connection now and again whenever one (re)connects (the script cache is per node). */
  onConnect(load: (send: Send) => Promise<unknown>): Promise<void>;
  /** Whether commands can be sent now (false while the connection to the one Redis, or to the cluster, is down). */
  readonly connected: boolean;
  /**
   * Whether one command may name keys of different slots (one Redis: yes; a cluster refuses it), so a caller can
   * read every shard's stream in one command instead of one per shard.
   */
  readonly multiSlot: boolean;
  /** The masters this process talks to now, as `host:port` (one entry, "redis", for a single Redis). */
  masters(): string[];
  /**
   * The master that owns `key`'s slot now, in a cluster (undefined on one Redis, which has no failover to follow):
   * whoever acknowledged a write to it, if the write went there.
   */
  ownerOf(key: string): string | undefined;
  /**
   * Calls `listener` with a master whose slots another node took over (a failover): a cluster's only. Slots left
   * without an owner for a while (a master down with no replica to promote) are no such change.
   */
  onOwnerLost(listener: (node: string) => void): void;
  close(): void;
}

/** A Redis URL or a unix socket path, as Bun's client wants it. */
export function bunRedisUrl(target: string): string {
  return target.startsWith("/") ? `redis+unix://${target}` : target;
}

/** Bun's native client as the routers use it: reconnecting for good, with or without an offline queue. */
export function bunClient(url: string, offlineQueue: boolean): RedisClient {
  return new RedisClient(url, { autoReconnect: true, maxRetries: 1_000_000, enableOfflineQueue: offlineQueue });
}

/**
 * One Redis on Bun's native client. Under Bun, ioredis spends most of the gateway's CPU in node:net writes and
 * its JS reply decoder; the native client halves the cost of each call (docs/benchmarks.md).
 */
export class SingleRouter implements KeyRouter {
  private readonly loaders: ((send: Send) => Promise<unknown>)[] = [];
  readonly multiSlot = true;

  constructor(readonly client: RedisClient) {
    // A restarted Redis has lost its script cache: load again on every (re)connect, so the EVALSHA fallback stays rare.
    client.onconnect = () => {
      for (const load of this.loaders) void load(this.sendRaw).catch(() => {});
    };
  }

  static open(target: string): SingleRouter {
    return new SingleRouter(bunClient(bunRedisUrl(target), true));
  }

  private readonly sendRaw: Send = (command, args) => this.client.send(command, args);

  send(command: string, args: string[]): Promise<unknown> {
    return this.client.send(command, args);
  }

  async onConnect(load: (send: Send) => Promise<unknown>): Promise<void> {
    this.loaders.push(load);
    await load(this.sendRaw);
  }

  get connected(): boolean {
    return this.client.connected;
  }

  masters(): string[] {
    return ["redis"];
  }

  ownerOf(): undefined {
    return undefined;
  }

  onOwnerLost(): void {}

  close(): void {
    this.client.close();
  }
}
