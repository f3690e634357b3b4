import { RedisClient } from "bun";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from "viem/accounts";
import { keySlot } from "../../src/redis/slot.ts";
import { freePort } from "./child.ts";

/** A fresh account whose wallet's shard lives on the master `port` (by `shardOf` and the master's slot ranges). */
export async function accountOn(cluster: TestCluster, port: number, shardOf: (wallet: string) => string): Promise<PrivateKeyAccount> {
  const master = (await cluster.masters()).find((m) => m.port === port);
  if (!master) throw new Error(`${port} is not a master`);
  for (;;) {
    const account = privateKeyToAccount(generatePrivateKey());
    const slot = keySlot(shardOf(account.address.toLowerCase()));
    if (master.slots.some(([lo, hi]) => slot >= lo && slot <= hi)) return account;
  }
}

/** One redis-server of the test cluster. */
export interface ClusterNode {
  port: number;
  /** Cluster bus port (cluster-port), a second free port. */
  busPort: number;
  dir: string;
  proc: Subprocess;
  /** `host:port`, as REDIS_CLUSTER_NODES and CLUSTER NODES name it. */
  address: string;
}

/** A real Redis Cluster on loopback: 3 masters with one replica each, private ports and directories. */
export interface TestCluster {
  nodes: ClusterNode[];
  /** REDIS_CLUSTER_NODES for a gateway: every node as a seed. */
  seeds: string;
  /** Runs redis-cli against one node and returns its output (trimmed). */
  cli(port: number, ...args: string[]): Promise<string>;
  /** The masters as the cluster sees them now, with their slot ranges. */
  masters(): Promise<{ address: string; port: number; slots: [number, number][] }[]>;
  /** The replica of a master, as the cluster sees it now. */
  replicaOf(port: number): Promise<number>;
  /**
   * Resolves once the replica of master `port` holds every write the master took so far, else throws after
   * `timeoutMs`. Redis Cluster replicates asynchronously: a test that kills the master counts on what it set up
   * before (wallets, grants, keys) being on the replica that takes over.
   */
  replicated(port: number, timeoutMs?: number): Promise<void>;
  /** kill -9 of one node (no persistence: its data is gone with it). */
  kill(port: number): Promise<void>;
  /** Starts a killed node again on its own port, directory and nodes.conf, empty. */
  restart(port: number): Promise<void>;
  /**
   * Master `port`'s writes from now on stay in its own memory, not on its replica, until `resume(replica)`: the
   * replica is stopped (SIGSTOP) and the link's socket buffers are filled with junk, which a stopped process's
   * kernel would otherwise still take in for it. A kill -9 of the master before the resume loses those writes, as
   * an asynchronous replica does. Returns the replica's port.
   */
  stall(port: number): Promise<number>;
  resume(port: number): void;
  /** Resolves once every live node reports cluster_state:ok and agrees on one master per slot range. */
  waitHealthy(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

// Nodes stopped by `stall`: a redis-cli asking one would wait until it is resumed.
const paused = new Set<Subprocess>();

/** A node's process is up and answering (a killed one has no exit code, only its signal). */
function running(n: { proc: Subprocess }): boolean {
  return n.proc.exitCode === null && n.proc.signalCode === null && !paused.has(n.proc);
}

function spawnNode(node: { port: number; busPort: number; dir: string }, nodeTimeoutMs: number): Subprocess {
  // No persistence (a killed node comes back empty), noeviction (the gateway refuses any other policy).
  return Bun.spawn(
    [
      "redis-server",
      "--port",
      String(node.port),
      "--bind",
      "127.0.0.1",
      "--cluster-enabled",
      "yes",
      "--cluster-port",
      String(node.busPort),
      "--cluster-config-file",
      "nodes.conf",
      "--cluster-node-timeout",
      String(nodeTimeoutMs),
      "--dir",
      node.dir,
      "--save",
      "",
      "--appendonly",
      "no",
      "--maxmemory-policy",
      "noeviction",
      "--daemonize",
      "no",
      "--loglevel",
      "warning",
      "--logfile",
      join(node.dir, "redis.log"),
    ],
    { stdout: "ignore", stderr: "inherit" },
  );
}

async function cli(port: number, ...args: string[]): Promise<string> {
  const p = Bun.spawn(["redis-cli", "-h", "127.0.0.1", "-p", String(port), ...args], { stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  if (code !== 0) throw new Error(`redis-cli -p ${port} ${args.join(" ")} exited ${code}: ${err}${out}`);
  return out.trim();
}

/** Runs `commands` (one a line) through one redis-cli connection to one node; returns its replies, one a line. */
async function cliSession(port: number, commands: string[]): Promise<string[]> {
  const p = Bun.spawn(["redis-cli", "-h", "127.0.0.1", "-p", String(port)], {
    stdin: new TextEncoder().encode(commands.join("\n") + "\n"),
    stdout: "pipe",
    stderr: "pipe",
  });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  if (code !== 0) throw new Error(`redis-cli -p ${port} exited ${code}: ${err}${out}`);
  return out.trim().split("\n");
}

async function until(what: string, timeoutMs: number, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`cluster: ${what} not reached within ${timeoutMs} ms`);
    await Bun.sleep(50);
  }
}

/**
 * Starts 6 redis-servers with `--cluster-enabled yes` and joins them with
 * `redis-cli --cluster create … --cluster-replicas 1 --cluster-yes`. One cluster per test file: it takes a few
 * seconds. `nodeTimeoutMs` is cluster-node-timeout: how long a silent master lasts before its replica takes over.
 */
export async function startCluster(opts: { nodeTimeoutMs?: number } = {}): Promise<TestCluster> {
  const nodeTimeoutMs = opts.nodeTimeoutMs ?? 1_000;
  const root = mkdtempSync(join(tmpdir(), "gw-cluster-"));
  const nodes: ClusterNode[] = [];
  const ports = new Set<number>();
  const port = () => {
    for (;;) {
      const p = freePort();
      if (!ports.has(p)) return (ports.add(p), p);
    }
  };
  for (let i = 0; i < 6; i++) {
    const n = { port: port(), busPort: port(), dir: join(root, `node${i}`) };
    mkdirSync(n.dir);
    nodes.push({ ...n, proc: spawnNode(n, nodeTimeoutMs), address: `127.0.0.1:${n.port}` });
  }
  const killed = new Set<Subprocess>();
  const stop = async () => {
    // A node that died without a test killing it is a broken run: its log says why.
    for (const n of nodes) {
      if (n.proc.exitCode !== null && !killed.has(n.proc)) {
        const tail = (
          await Bun.file(join(n.dir, "redis.log"))
            .text()
            .catch(() => "")
        )
          .split("\n")
          .slice(-20)
          .join("\n");
        console.error(`cluster node ${n.port} exited by itself (${n.proc.exitCode}):\n${tail}`);
      }
    }
    for (const n of nodes) n.proc.kill("SIGKILL");
    await Promise.all(nodes.map((n) => n.proc.exited));
    rmSync(root, { recursive: true, force: true });
  };
  try {
    for (const n of nodes) await until(`node ${n.port} answering`, 10_000, async () => (await cli(n.port, "PING")) === "PONG");
    await cli(nodes[0]!.port, "--cluster", "create", ...nodes.map((n) => n.address), "--cluster-replicas", "1", "--cluster-yes");
  } catch (e) {
    await stop();
    throw e;
  }

  /** A key of a slot master `p` owns, outside the gateway's gw: names. */
  const keyOn = async (p: number): Promise<string> => {
    const master = (await cluster.masters()).find((m) => m.port === p);
    if (!master) throw new Error(`${p} is not a master`);
    for (let i = 0; ; i++) {
      const key = `test:on-master:${i}`;
      const slot = keySlot(key);
      if (master.slots.some(([lo, hi]) => slot >= lo && slot <= hi)) return key;
    }
  };
  const cluster: TestCluster = {
    nodes,
    seeds: nodes.map((n) => n.address).join(","),
    cli,
    async masters() {
      const alive = nodes.find(running)!;
      const out = await cli(alive.port, "CLUSTER", "NODES");
      const masters = [];
      for (const line of out.split("\n")) {
        const [, addr, flags, , , , , , ...slots] = line.split(" ");
        if (!flags?.split(",").includes("master") || flags.includes("fail")) continue;
        const address = addr!.split("@")[0]!;
        const ranges = slots
          .filter((s) => /^\d/.test(s))
          .map((s) => {
            const [a, b] = s.split("-").map(Number);
            return [a!, b ?? a!] as [number, number];
          });
        if (ranges.length > 0) masters.push({ address, port: Number(address.split(":")[1]), slots: ranges });
      }
      return masters;
    },
    async replicaOf(p) {
      const alive = nodes.find(running)!;
      const lines = (await cli(alive.port, "CLUSTER", "NODES")).split("\n").map((l) => l.split(" "));
      const master = lines.find((l) => l[1]!.startsWith(`127.0.0.1:${p}@`))!;
      const replica = lines.find((l) => l[3] === master[0] && !l[2]!.includes("fail"));
      if (!replica) throw new Error(`master ${p} has no live replica`);
      return Number(replica[1]!.split("@")[0]!.split(":")[1]);
    },
    async replicated(p, timeoutMs = 10_000) {
      // WAIT counts from the write its own connection made last, and the replication stream is one per master, so
      // it covers every earlier write.
      const key = await keyOn(p);
      const replies = await cliSession(p, [`SET ${key} ${Date.now()}`, `WAIT 1 ${timeoutMs}`]);
      if (replies[0] !== "OK" || replies[1] !== "1") {
        throw new Error(`cluster: master ${p}'s replica did not acknowledge its writes within ${timeoutMs} ms: ${replies.join(" ")}`);
      }
    },
    async kill(p) {
      const n = nodes.find((x) => x.port === p)!;
      killed.add(n.proc);
      n.proc.kill("SIGKILL");
      await n.proc.exited;
    },
    async stall(p) {
      const replica = await cluster.replicaOf(p);
      const key = await keyOn(p);
      const stopped = nodes.find((x) => x.port === replica)!;
      stopped.proc.kill("SIGSTOP");
      paused.add(stopped.proc);
      const master = new RedisClient(`redis://127.0.0.1:${p}`);
      try {
        // Loopback socket buffers take up to tcp_rmem + tcp_wmem (32 + 4 MB here); 9 × 8 MB fills them.
        const junk = "j".repeat(8 << 20);
        for (let i = 0; i < 9; i++) await master.send("SET", [key, junk]);
        await master.send("DEL", [key]);
      } catch (e) {
        cluster.resume(replica);
        throw e;
      } finally {
        master.close();
      }
      return replica;
    },
    resume(p) {
      const n = nodes.find((x) => x.port === p)!;
      n.proc.kill("SIGCONT");
      paused.delete(n.proc);
    },
    async restart(p) {
      const n = nodes.find((x) => x.port === p)!;
      n.proc = spawnNode(n, nodeTimeoutMs);
      await until(`node ${p} answering again`, 10_000, async () => (await cli(p, "PING")) === "PONG");
    },
    async waitHealthy(timeoutMs = 20_000) {
      await until("cluster_state:ok on every node, 16384 slots on 3 masters, every other node a replica in sync", timeoutMs, async () => {
        const live = nodes.filter(running);
        for (const n of live) {
          if (!(await cli(n.port, "CLUSTER", "INFO")).includes("cluster_state:ok")) return false;
          const replication = await cli(n.port, "INFO", "replication");
          if (replication.includes("role:slave") && !replication.includes("master_link_status:up")) return false;
          // Every node has heard of every live node's role (gossip has settled).
          const known = (await cli(n.port, "CLUSTER", "NODES")).split("\n").filter((l) => !l.includes("fail") && !l.includes("handshake"));
          if (known.filter((l) => l.includes("slave")).length !== live.length - 3) return false;
        }
        const masters = await cluster.masters();
        const covered = masters.reduce((sum, m) => sum + m.slots.reduce((s, [a, b]) => s + b - a + 1, 0), 0);
        return masters.length === 3 && covered === 16384;
      });
    },
    stop,
  };
  await cluster.waitHealthy();
  return cluster;
}
