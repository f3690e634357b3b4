import type { RedisClient } from "bun";
import type { Cluster } from "ioredis";
import { withDeadline } from "../deadline.ts";
import { log } from "../log.ts";
import { DependencyDown } from "../outage.ts";
import { bunClient, type KeyRouter, type Send } from "./router.ts";
import { keySlot } from "./slot.ts";

// Replies that say the slot map this process routes by is out of date, or the cluster is between owners.
const REROUTE = /^(MOVED|ASK|TRYAGAIN|CLUSTERDOWN) /;
const SLOTS = 16384;
// A slot's route through ioredis' Cluster client; CHANGED matches no route, so the slot's next command waits for
// the one before it.
const DETOUR = "cluster";
const CHANGED = "changed";
const noop = () => {};
// A command that waits for the one before it waits this long at most (a failover's detour takes a few seconds): a
// command the Cluster client keeps queued through a long outage must not hold up its slot for good once a master
// answers again (order is then no longer promised).
const ORDER_WAIT_MS = 10_000;

/**
 * A Redis Cluster: ioredis' Cluster keeps the slot map (it follows MOVED/ASK, failovers and topology changes, and
 * refreshes the map every few seconds), and every command goes out on a Bun client per master, chosen by the key's
 * slot in that map, so the hot path costs the same as on one Redis. A command refused because the map was stale
 * (MOVED, ASK), or sent while its master is unreachable or between owners (a failover), is sent again through
 * ioredis' Cluster, which redirects and retries, and the map is refreshed. A command whose connection broke in flight
 * is not resent (it may have run): it fails like it does on one Redis.
 *
 * Commands of one slot run in the order they were sent, as on one connection, whichever way each goes: while they
 * all take the same route they share its connection; when the route changes (the Cluster client's detour, a
 * failover's new master), the next command waits for the previous one's reply first (for ORDER_WAIT_MS at most). A
 * balance read sent after an answer so still follows that answer's settle through a failover (docs/operating.md "Scaling out", Redis Cluster).
 */
export class ClusterRouter implements KeyRouter {
  private readonly clients = new Map<string, RedisClient>();
  private readonly loaders: ((send: Send) => Promise<unknown>)[] = [];
  private readonly slotCache = new Map<string, number>();
  /** Per slot, the route its last command took (a master's address, or DETOUR) and that command's outcome. */
  private readonly routes: (string | undefined)[] = new Array(SLOTS);
  private readonly lastOf: (Promise<unknown> | undefined)[] = new Array(SLOTS);
  private readonly ownerLost: ((node: string) => void)[] = [];
  /** Each slot's last known owner, to tell when another node takes a master's slots over. */
  private readonly ownerOfSlot: (string | undefined)[] = new Array(SLOTS);
  readonly multiSlot = false;

  constructor(
    readonly cluster: Cluster,
    private readonly password?: string,
  ) {
    // A new slot map: masters whose slots another node took are told to the listeners, and connections to nodes
    // that no longer own a slot (a failed master, now a replica or gone) are closed.
    cluster.on("refresh", () => this.onRefresh());
  }

  ownerOf(key: string): string | undefined {
    return this.cluster.slots[this.slotOf(key)]?.[0];
  }

  onOwnerLost(listener: (node: string) => void): void {
    this.ownerLost.push(listener);
  }

  send(command: string, args: string[], key?: string): Promise<unknown> {
    if (key === undefined) return this.sendOn(this.anyMaster(), command, args);
    const slot = this.slotOf(key);
    const route = this.routeOf(slot);
    const last = this.lastOf[slot];
    let p: Promise<unknown>;
    if (route === this.routes[slot] || last === undefined) {
      this.routes[slot] = route;
      p = this.sendOn(route === DETOUR ? undefined : route, command, args, slot);
    } else {
      // The route changed (or a command was redirected): earlier commands of the slot may still be on the old route.
      this.routes[slot] = CHANGED;
      const earlier = withDeadline(
        ORDER_WAIT_MS,
        () => last,
        () => new Error("order wait over"),
      );
      p = earlier.then(noop, noop).then(() => {
        const now = this.routeOf(slot);
        if (this.lastOf[slot] === p) this.routes[slot] = now;
        return this.sendOn(now === DETOUR ? undefined : now, command, args, slot);
      });
    }
    this.lastOf[slot] = p;
    return p;
  }

  /** Where a command of `slot` goes now: its master's Bun client when connected, else through the Cluster client. */
  private routeOf(slot: number): string {
    const node = this.cluster.slots[slot]?.[0];
    return node !== undefined && this.client(node).connected ? node : DETOUR;
  }

  private sendOn(node: string | undefined, command: string, args: string[], slot?: number): Promise<unknown> {
    const client = node === undefined ? undefined : this.client(node);
    if (!client?.connected) return this.viaCluster(command, args);
    return client.send(command, args).catch((e: unknown) => {
      if (!(e instanceof Error) || !REROUTE.test(e.message)) throw e;
      // Commands of the slot sent from now on wait for this one's redirected run.
      if (slot !== undefined) this.routes[slot] = CHANGED;
      this.cluster.refreshSlotsCache();
      return this.viaCluster(command, args);
    });
  }

  async onConnect(load: (send: Send) => Promise<unknown>): Promise<void> {
    this.loaders.push(load);
    await Promise.all(
      this.masters().map(async (node) => {
        const c = this.client(node);
        await c.connect();
        await load((command, args) => c.send(command, args));
      }),
    );
  }

  get connected(): boolean {
    return this.cluster.status === "ready";
  }

  masters(): string[] {
    const owners = new Set<string>();
    for (const nodes of this.cluster.slots) if (nodes?.[0]) owners.add(nodes[0]);
    return [...owners];
  }

  close(): void {
    for (const c of this.clients.values()) c.close();
    this.clients.clear();
  }

  /** Routing keys repeat (a shard's few names); their hash tag's slot is computed once. */
  private slotOf(key: string): number {
    const open = key.indexOf("{");
    const tag = open >= 0 ? key.slice(open, key.indexOf("}", open) + 1) : key;
    let slot = this.slotCache.get(tag);
    if (slot === undefined) {
      slot = keySlot(key);
      if (open >= 0) this.slotCache.set(tag, slot);
    }
    return slot;
  }

  private anyMaster(): string | undefined {
    return this.cluster.slots[0]?.[0];
  }

  private client(node: string): RedisClient {
    let c = this.clients.get(node);
    if (!c) {
      const auth = this.password ? `:${encodeURIComponent(this.password)}@` : "";
      // No offline queue: while a master is unreachable its commands go through the Cluster client, which waits
      // for the failover, instead of queueing behind a dead address.
      c = bunClient(`redis://${auth}${node}`, false);
      c.onconnect = () => {
        for (const load of this.loaders) void load((command, args) => c!.send(command, args)).catch(() => {});
      };
      c.connect().catch(() => {});
      this.clients.set(node, c);
    }
    return c;
  }

  private viaCluster(command: string, args: string[]): Promise<unknown> {
    return this.cluster.call(command, ...args).catch((e: unknown) => {
      // A reply (NOSCRIPT, a script's own error, CLUSTERDOWN) stays what it is; anything else is the cluster out
      // of reach: too many redirections while a master fails over, no node answering, a closed connection.
      if (e instanceof Error && e.name === "ReplyError") throw e;
      throw new DependencyDown("redis", `Redis Cluster unreachable: ${e instanceof Error ? e.message : String(e)}`);
    });
  }

  private onRefresh(): void {
    const owners = new Set<string>();
    const replaced = new Set<string>();
    for (let slot = 0; slot < SLOTS; slot++) {
      const now = this.cluster.slots[slot]?.[0];
      if (now === undefined) continue;
      owners.add(now);
      const before = this.ownerOfSlot[slot];
      if (before !== undefined && before !== now) replaced.add(before);
      this.ownerOfSlot[slot] = now;
    }
    for (const node of replaced) for (const listener of this.ownerLost) listener(node);
    for (const [node, c] of this.clients) {
      if (owners.has(node)) continue;
      log.info("Redis Cluster node no longer owns slots; its connection is closed", { node });
      c.close();
      this.clients.delete(node);
    }
  }
}
