import type { TestCluster } from "./cluster.ts";

/** The statuses a chat may answer while a dependency fails over: served, refused for money or rate, or "retry". */
export const FAILOVER_STATUSES = new Set([200, 402, 429, 503, 504]);

/** A gateway the load is sent to: the in-process app, or a child process over HTTP. */
export interface Gateway {
  name: string;
  fetch(path: string, init: RequestInit): Promise<Response>;
}

/** A wallet the load charges, with its key. */
export interface LoadWallet {
  wallet: string;
  key: string;
  /** Keys of the wallet no gateway has seen yet: each is sent once per gateway after `startCold`, none cached. */
  fresh?: string[];
}

/** One chat answer of the load. */
export interface Answer {
  gateway: string;
  wallet: string;
  stream: boolean;
  status: number;
  /** When the request was sent and when its answer (the whole body) was in, Date.now(). */
  sentAt: number;
  at: number;
  /** The charge the answer reported (its usage at the catalog's prices); 0 for anything but a whole 200. */
  charge: number;
  /** The body of an answer outside FAILOVER_STATUSES, or of a stream that did not end with its usage and [DONE]. */
  odd?: string;
}

const messages = [{ role: "user", content: "Say hello." }];

/**
 * Chat traffic on every (gateway, wallet) pair until stopped: one worker sending JSON requests and one sending
 * streams (with include_usage) per pair, each waiting for its answer before the next, so every answer is kept
 * with what it charged.
 */
export class ChatLoad {
  readonly answers: Answer[] = [];
  private stopped = false;
  private readonly workers: Promise<void>[] = [];
  private coldStarted!: () => void;
  private stopped_!: () => void;
  private readonly stopping = new Promise<void>((resolve) => (this.stopped_ = resolve));
  private readonly cold = new Promise<void>((resolve) => (this.coldStarted = resolve));

  constructor(
    private readonly gateways: Gateway[],
    private readonly wallets: LoadWallet[],
    private readonly chargeOf: (usage: { prompt_tokens: number; completion_tokens: number }) => number,
  ) {
    for (const g of gateways) {
      for (const w of wallets) {
        for (const stream of [false, true]) this.workers.push(this.work(g, w, stream));
        if (w.fresh) this.workers.push(this.workCold(g, w, w.fresh));
      }
    }
  }

  /** Starts sending the wallets' fresh keys: a gateway resolves each of them in Redis first (no key is cached yet). */
  startCold(): void {
    this.coldStarted();
  }

  /** Stops sending and waits for the answers in flight. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.stopped_();
    await Promise.all(this.workers);
  }

  /** The first 200 from `gateway` for `wallet` to a request sent at or after `since`. */
  servedSince(gateway: string, wallet: string, since: number): Answer | undefined {
    return this.answers.find((a) => a.gateway === gateway && a.wallet === wallet && a.status === 200 && a.sentAt >= since);
  }

  /** Resolves once `done` holds, polled as answers come in; rejects after `timeoutMs`. */
  async until(what: string, timeoutMs: number, done: () => boolean): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!done()) {
      if (Date.now() > deadline) throw new Error(`load: ${what} not seen within ${timeoutMs} ms`);
      await Bun.sleep(20);
    }
  }

  private async work(g: Gateway, w: LoadWallet, stream: boolean): Promise<void> {
    while (!this.stopped) await this.once(g, w, stream);
  }

  private async once(g: Gateway, w: LoadWallet, stream: boolean): Promise<void> {
    const sentAt = Date.now();
    const answer = await this.send(g, w, stream).catch((e: unknown) => ({ status: -1, charge: 0, odd: `request failed: ${String(e)}` }));
    this.answers.push({ gateway: g.name, wallet: w.wallet, stream, sentAt, at: Date.now(), ...answer });
    // Refusals come back fast: a short pause keeps a refused worker from spinning on the 2 cores.
    if (answer.status !== 200) await Bun.sleep(25);
  }

  private async workCold(g: Gateway, w: LoadWallet, fresh: string[]): Promise<void> {
    await Promise.race([this.cold, this.stopping]);
    for (const key of fresh) {
      if (this.stopped) return;
      await this.once(g, { ...w, key }, false);
    }
  }

  private async send(g: Gateway, w: LoadWallet, stream: boolean): Promise<{ status: number; charge: number; odd?: string }> {
    const body = {
      model: "standin/echo",
      messages,
      max_tokens: 50,
      ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    };
    const res = await g.fetch("/v1/chat/completions", {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${w.key}` },
      body: JSON.stringify(body),
    });
    const text = await res.text();
    if (!FAILOVER_STATUSES.has(res.status)) return { status: res.status, charge: 0, odd: text };
    if (res.status !== 200) return { status: res.status, charge: 0 };
    if (!stream) return { status: 200, charge: this.chargeOf(JSON.parse(text).usage) };
    const payloads = text
      .split("\n\n")
      .filter((l) => l.startsWith("data: "))
      .map((l) => l.slice(6));
    const usage = payloads
      .filter((p) => p !== "[DONE]")
      .map((p) => JSON.parse(p))
      .find((c) => c.usage)?.usage;
    if (!usage || payloads.at(-1) !== "[DONE]") return { status: 200, charge: 0, odd: text };
    return { status: 200, charge: this.chargeOf(usage) };
  }
}

/** What one failover round measured. */
export interface FailoverRound {
  killedAt: number;
  promotedAt: number;
  /** Per gateway: ms from the promotion to its first 200 on the killed master's wallet (sent after the kill). */
  servedAfterMs: Record<string, number>;
}

/**
 * Kills `victim` (a master) with kill -9 while `load` runs, and waits for its replica's promotion and for every
 * gateway to serve `onVictim` again (at most `serveWithinMs` after the promotion, else it throws).
 */
export async function failoverRound(
  cluster: TestCluster,
  load: ChatLoad,
  gateways: Gateway[],
  victim: number,
  onVictim: string,
  serveWithinMs: number,
): Promise<FailoverRound> {
  const replica = await cluster.replicaOf(victim);
  const warm = Date.now();
  await load.until("a 200 from every gateway before the kill", 10_000, () =>
    gateways.every((g) => load.servedSince(g.name, onVictim, warm)),
  );
  await cluster.kill(victim);
  const killedAt = Date.now();
  load.startCold();
  let promotedAt = 0;
  const deadline = killedAt + 30_000;
  while (!promotedAt) {
    if (Date.now() > deadline) throw new Error(`replica ${replica} of ${victim} not promoted within 30 s`);
    if ((await cluster.masters().catch(() => [])).some((m) => m.port === replica)) promotedAt = Date.now();
    else await Bun.sleep(50);
  }
  await load
    .until(`every gateway serving within ${serveWithinMs} ms of the promotion`, promotedAt + serveWithinMs - Date.now(), () =>
      gateways.every((g) => load.servedSince(g.name, onVictim, killedAt)),
    )
    .catch(() => {});
  const servedAfterMs: Record<string, number> = {};
  for (const g of gateways) {
    const first = load.servedSince(g.name, onVictim, killedAt);
    servedAfterMs[g.name] = first ? first.at - promotedAt : Infinity;
  }
  return { killedAt, promotedAt, servedAfterMs };
}
