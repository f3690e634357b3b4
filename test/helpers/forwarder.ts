import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Socket, TCPSocketListener, UnixSocketListener } from "bun";

/** Where a forwarder listens or connects: a unix socket path, or a TCP host and port. */
export type Address = { unix: string } | { hostname: string; port: number };

interface Pair {
  client: Socket<Pair>;
  server?: Socket<undefined>;
  /** Client bytes that arrived before the upstream connection was open. */
  early: Uint8Array[];
  /** Set by `loseNextReply`: the upstream's next answer on this pair is dropped and the client cut off. */
  loseReply?: boolean;
}

/**
 * A byte forwarder in front of a real Redis or Postgres, so a test can take the dependency away and give it
 * back (`down` / `up`) without touching its data, or lose the answer to one command (`loseNextReply`): the
 * command reaches the server and runs there, the client sees its connection close instead of the reply.
 */
export interface Forwarder {
  /** Where clients connect: same kind as the target (unix path or TCP port). */
  address: Address;
  /** Closes every connection and refuses new ones (connect is refused: the socket or port is gone). */
  down(): Promise<void>;
  /**
   * Closes every connection; new ones are accepted but never answered (a host that is frozen or cut off by the
   * network), until `up`. Those stay silent after `up` too, until their client gives up on them.
   */
  stall(): Promise<void>;
  /** Connections accepted while stalled, so far. */
  readonly stalledConnects: number;
  /** Listens again at the same address and forwards new connections. */
  up(): void;
  /** The next client chunk that contains `marker` is forwarded; the server's answer to it is dropped and that client's connection closed. */
  loseNextReply(marker: string): void;
  stop(): Promise<void>;
}

// Bytes a socket did not take yet (Bun's write may take part of a chunk); sent on its drain event.
const backlog = new WeakMap<Socket<any>, Uint8Array[]>();

function send(sock: Socket<any>, chunk: Uint8Array): void {
  const queued = backlog.get(sock);
  if (queued) return void queued.push(chunk);
  const n = sock.write(chunk);
  if (n < chunk.byteLength) backlog.set(sock, [chunk.subarray(Math.max(0, n))]);
}

function drain(sock: Socket<any>): void {
  const queued = backlog.get(sock);
  if (!queued) return;
  backlog.delete(sock);
  for (const chunk of queued) send(sock, chunk);
}

export function startForwarder(target: Address): Forwarder {
  const dir = "unix" in target ? mkdtempSync(join(tmpdir(), "gw-fwd-")) : undefined;
  const pairs = new Set<Pair>();
  let lose: string | undefined;
  let stalled = false;
  let stalledConnects = 0;
  let listener: UnixSocketListener<Pair> | TCPSocketListener<Pair> | undefined;
  let address: Address = dir ? { unix: join(dir, "fwd.sock") } : { hostname: "127.0.0.1", port: 0 };

  const closePair = (p: Pair) => {
    pairs.delete(p);
    p.client.end();
    p.server?.end();
  };

  const handlers = {
    open(client: Socket<Pair>) {
      const pair: Pair = { client, early: [] };
      client.data = pair;
      pairs.add(pair);
      if (stalled) return void stalledConnects++; // accepted, never forwarded: its bytes go to `early` and stay there
      const upstream = "unix" in target ? { unix: target.unix } : { hostname: target.hostname, port: target.port };
      void Bun.connect<undefined>({
        ...upstream,
        socket: {
          open(server) {
            pair.server = server;
            for (const chunk of pair.early) send(server, chunk);
            pair.early = [];
          },
          data(_server, chunk) {
            if (pair.loseReply) return closePair(pair);
            send(pair.client, new Uint8Array(chunk));
          },
          drain,
          close: () => closePair(pair),
          error: () => closePair(pair),
        },
      } as Parameters<typeof Bun.connect<undefined>>[0]).catch(() => closePair(pair));
    },
    data(client: Socket<Pair>, chunk: Uint8Array) {
      const pair = client.data;
      if (lose && Buffer.from(chunk).includes(lose)) {
        lose = undefined;
        pair.loseReply = true;
      }
      if (pair.server) send(pair.server, new Uint8Array(chunk));
      else pair.early.push(new Uint8Array(chunk));
    },
    drain,
    close(client: Socket<Pair>) {
      closePair(client.data);
    },
    error(client: Socket<Pair>) {
      closePair(client.data);
    },
  };

  const listen = () => {
    if ("unix" in address) {
      rmSync(address.unix, { force: true });
      listener = Bun.listen<Pair>({ unix: address.unix, socket: handlers });
    } else {
      listener = Bun.listen<Pair>({ hostname: address.hostname, port: address.port, socket: handlers });
      address = { hostname: address.hostname, port: listener.port };
    }
  };
  listen();

  const fwd: Forwarder = {
    get address() {
      return address;
    },
    get stalledConnects() {
      return stalledConnects;
    },
    async down() {
      listener?.stop(true);
      listener = undefined;
      if ("unix" in address) rmSync(address.unix, { force: true });
      for (const p of [...pairs]) closePair(p);
    },
    async stall() {
      for (const p of [...pairs]) closePair(p);
      stalled = true;
    },
    up() {
      stalled = false;
      if (!listener) listen();
    },
    loseNextReply(marker) {
      lose = marker;
    },
    async stop() {
      await fwd.down();
      if (dir) rmSync(dir, { recursive: true, force: true });
    },
  };
  return fwd;
}
