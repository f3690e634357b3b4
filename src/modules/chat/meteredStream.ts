import type { Ledger } from "../../ledger/ledger.ts";
import { withCharge } from "../../providers/charged.ts";
import { joinBytes, type RelayPart, SseDecoder, type SseRelay } from "../../providers/sse.ts";
import type { DoorStream, StreamStep, StreamTranslator } from "../../providers/types.ts";
import { type Call, upstreamFailed } from "./call.ts";
import type { IdleDeadline } from "./idleDeadline.ts";
import type { Holds } from "../../billing/holds.ts";
import { StreamFrames } from "./streamFrames.ts";
import { UsageTally } from "./usageTally.ts";

const encoder = new TextEncoder();

/**
 * Once the provider's usage is known, the usage object a step carries (the chat usage chunk, a provider's own
 * message_delta, the object a door reads) says what the request is charged: `charge_usdc`, µUSDC.
 */
function chargeInto(step: StreamStep, charge: number): void {
  const usage = (step.parsed as { usage?: unknown } | undefined)?.usage;
  if (usage && typeof usage === "object") (usage as Record<string, unknown>).charge_usdc = charge;
  else if (step.chunk?.includes('"usage"')) step.chunk = withCharge(step.chunk, charge);
}

/** What a metered stream needs besides its call. */
export interface MeterOptions {
  holds: Holds;
  ledger: Pick<Ledger, "extendHold" | "holdRefreshMs">;
  deadline: IdleDeadline;
  /** The client asked for the usage chunk (stream_options.include_usage). */
  includeUsage: boolean;
  /** A stream still running after this long is stopped and charged for what it produced (STREAM_MAX_MS). */
  maxStreamMs: number;
  /** A front door's translation of what a chat client would read (providers/types.ts DoorStream); none for chat. */
  door?: DoorStream;
}

/**
 * One upstream SSE stream passed on to the client, translated to OpenAI chunks, metered as it goes and resolved
 * exactly once: settled at its end (the provider's usage, else the counted one), released when the provider fails,
 * settled for what it produced when the client leaves or the time cap passes. Its hold is kept alive meanwhile.
 */
export class MeteredStream {
  /** Resolves when the stream's charge is decided (the access-log line waits for it). */
  readonly ended: Promise<void>;

  private readonly reader: ReadableStreamDefaultReader<Uint8Array>;
  /** The provider's bytes passed on as they came where the translator offers it (a chat client), else decoded. */
  private readonly relay: SseRelay | undefined;
  private readonly decoder: SseDecoder | undefined;
  private readonly translate: StreamTranslator;
  /** What the stream has cost so far (the provider's usage, else counted). */
  private readonly tally: UsageTally;
  /** What the gateway itself writes to the client (chat's frames, or a door's), apart from the meter. */
  private readonly frames: StreamFrames;
  private readonly started = Date.now();
  /** The hold is settled or released (or about to be): nothing else may resolve it. */
  private resolved = false;
  /**
   * A pull is under way: the client took all it was sent and the gateway waits on the provider. Otherwise output
   * sits unread in the client's queue while the provider keeps generating (and billing) into buffers.
   */
  private reading = false;
  private end!: () => void;
  /** Where output goes: the first read's collected (open), then the client's stream. */
  private client: Sink | undefined;
  private readonly keepHold: ReturnType<typeof setInterval> | undefined;
  private readonly cap: ReturnType<typeof setTimeout>;

  constructor(
    private readonly call: Call,
    upstream: ReadableStream<Uint8Array>,
    private readonly o: MeterOptions,
  ) {
    this.reader = upstream.getReader();
    this.translate = call.adapter.openStream(o.includeUsage, call.asked, o.door !== undefined);
    this.relay = o.door ? undefined : this.translate.relay?.();
    if (!this.relay) this.decoder = new SseDecoder();
    this.tally = new UsageTally(call, this.translate);
    this.frames = new StreamFrames(call, o.door);
    this.ended = new Promise<void>((resolve) => (this.end = resolve));
    // A stream can outlive a hold's lifetime (a long answer, a slow reader): while it runs, its hold is kept from
    // expiring, or the sweeper would hand the credit to other requests and the settle would overdraw.
    // (A request a credit lease admitted has no hold of its own: its lease is renewed while anything is in use.)
    this.keepHold = call.lease
      ? undefined
      : setInterval(() => void o.ledger.extendHold(call.principal, call.holdId).catch(() => {}), o.ledger.holdRefreshMs);
    this.cap = setTimeout(() => void this.timeUp(), o.maxStreamMs);
  }

  /**
   * The client's body (`data:` chunks, a StreamErrorEvent on a provider failure, `data: [DONE]` last), from the
   * first upstream read on, which is taken before the answer leaves: its output goes with the headers in one write.
   * A stream that ended within it (a short answer, a failure) is the whole answer's bytes, settled: a fixed body Bun
   * sends natively, as it does a JSON answer. Otherwise a stream that starts with that output.
   */
  async open(): Promise<Uint8Array<ArrayBuffer> | ReadableStream<Uint8Array>> {
    const first = new Collected();
    this.client = first;
    await this.pull(first);
    if (first.closed) return first.bytes();
    return new ReadableStream<Uint8Array>({
      start: (ctrl) => {
        this.client = ctrl;
        if (first.parts.length > 0) ctrl.enqueue(first.bytes());
      },
      pull: (ctrl) => this.pull(ctrl),
      cancel: () => this.cancel(),
    });
  }

  /** Each pull forwards one upstream read, counted as reading while it waits on the provider. */
  private async pull(ctrl: Sink): Promise<void> {
    this.reading = true;
    try {
      await this.forward(ctrl);
    } finally {
      this.reading = false;
    }
  }

  /** One upstream read passed on; the loop only repeats when a read produced nothing to send. */
  private async forward(ctrl: Sink): Promise<void> {
    const { deadline } = this.o;
    for (;;) {
      let read: Awaited<ReturnType<ReadableStreamDefaultReader<Uint8Array>["read"]>>;
      deadline.arm();
      try {
        read = await this.reader.read();
      } catch {
        return this.finish(ctrl, false);
      } finally {
        deadline.disarm();
      }
      if (this.resolved) return; // cancelled while the read was under way
      const { relay, decoder } = this;
      const parts: RelayPart[] = relay
        ? read.done
          ? relay.end()
          : relay.push(read.value)
        : read.done
          ? decoder!.end()
          : decoder!.push(read.value);
      const out = new Output(this.frames.takeOpening());
      let done = false;
      let failed = false;
      for (const part of parts) {
        if (typeof part !== "string") {
          out.bytes(part);
          continue;
        }
        let step: StreamStep;
        try {
          step = this.translate(part);
        } catch {
          step = { failed: true };
        }
        if (step.failed) {
          failed = true;
          break;
        }
        this.tally.count(step);
        if (this.tally.usage) chargeInto(step, this.tally.charged(this.tally.usage));
        out.text(this.frames.step(step));
        if (step.done) done = true;
      }
      // An upstream that closes without its end marker failed mid-answer, unless it already sent its usage.
      const ok = !failed && (done || (read.done && this.tally.usage !== undefined));
      // The last read leaves with the stream's last frames once the charge is known: one write.
      if (ok) return this.finish(ctrl, true, out);
      // What arrived before a failure in the same read still reaches the client.
      const sent = out.take();
      if (sent) ctrl.enqueue(sent);
      if (failed || read.done) return this.finish(ctrl, false);
      if (sent) return;
    }
  }

  /**
   * The upstream ended (ok) or failed: settle or release, then close the client's stream. `out`: the last read's
   * output, not sent yet (it leaves with the last frames).
   */
  private async finish(ctrl: Sink, ok: boolean, out = new Output()): Promise<void> {
    const { deadline, holds } = this.o;
    deadline.close();
    clearInterval(this.keepHold);
    clearTimeout(this.cap);
    if (this.resolved) return; // the client cancelled first; cancel() resolved the hold
    this.resolved = true;
    if (ok) {
      const billed = await this.tally.cost();
      // The stream's end leaves once its charge is on the Redis connection (see settleBehind).
      const onWire = holds.settleBehind(this.call, billed);
      this.frames.settled();
      await onWire;
      // The client asked for the usage chunk and the provider sent none: it gets the counted usage it pays for.
      if (this.o.includeUsage && this.tally.usage === undefined) out.text(this.frames.usage(this.call, billed));
    } else {
      // Spec: a provider failure or an idle deadline mid-stream releases the hold; nothing is charged.
      upstreamFailed(this.call, deadline.passed ? "timeout" : "stream_broken", { after_ms: Math.round(Date.now() - this.started) });
      deadline.stop();
      await holds.release(this.call);
    }
    // A door's last frames follow its text; chat's are fixed bytes after whatever is left to send.
    const last = this.frames.last(ok, this.frames.door ? out.takeText() : "");
    if (last.length > 0) out.bytes(last);
    try {
      const bytes = out.take();
      if (bytes) ctrl.enqueue(bytes);
      ctrl.close();
    } catch {
      // The client left while the charge went out: it is resolved above all the same, and the stream's end must
      // still be told (the access-log line waits for it).
    }
    this.end();
  }

  /**
   * The client went away: stop the provider, charge the prompt and what was generated until now (the completion
   * bound if the client had stopped reading); the settle releases the rest of the hold.
   */
  private async cancel(): Promise<void> {
    clearInterval(this.keepHold);
    clearTimeout(this.cap);
    this.o.deadline.stop();
    if (this.resolved) return;
    this.resolved = true;
    void this.o.holds.settleBehind(this.call, await this.tally.stoppedCost("client_gone", this.reading));
    this.end();
  }

  /**
   * A client that keeps the connection but stops reading would keep it (and the hold) forever: at the time cap the
   * stream ends and is charged what it produced, which the provider bills (releasing it would hand the client that
   * output for free; see UsageTally.stoppedCost); the upstream is stopped once the settle is under way.
   */
  private async timeUp(): Promise<void> {
    this.o.deadline.close();
    clearInterval(this.keepHold);
    if (this.resolved) return;
    this.resolved = true;
    void this.o.holds.settleBehind(this.call, await this.tally.stoppedCost("time_cap", this.reading));
    this.end();
    this.o.deadline.stop();
    try {
      const cut = this.frames.cut();
      if (cut.length > 0) this.client?.enqueue(cut);
      this.client?.close();
    } catch {
      // the client went away meanwhile
    }
  }
}

/** Where a stream's output goes: the client's stream, or the first read's output (MeteredStream.open). */
type Sink = Pick<ReadableStreamDefaultController<Uint8Array>, "enqueue" | "close">;

/** The first read's output, kept until the answer leaves with it. */
class Collected implements Sink {
  readonly parts: Uint8Array[] = [];
  closed = false;

  enqueue(b: Uint8Array): void {
    this.parts.push(b);
  }

  close(): void {
    this.closed = true;
  }

  bytes(): Uint8Array<ArrayBuffer> {
    return joinBytes(this.parts) as Uint8Array<ArrayBuffer>; // every part is over an ArrayBuffer (no shared memory)
  }
}

/**
 * What one read sends the client, in order: the provider's bytes as they came and the gateway's own text, encoded
 * once per run of text and written as one array.
 */
class Output {
  private readonly parts: Uint8Array[] = [];

  constructor(private pending = "") {}

  bytes(b: Uint8Array): void {
    if (this.pending) this.parts.push(encoder.encode(this.takeText()));
    this.parts.push(b);
  }

  text(s: string): void {
    this.pending += s;
  }

  /** The text after the last bytes, taken out (a door's last frames follow it). */
  takeText(): string {
    const t = this.pending;
    this.pending = "";
    return t;
  }

  /** Everything, as one array; undefined when there is nothing to send. */
  take(): Uint8Array | undefined {
    if (this.pending) this.parts.push(encoder.encode(this.takeText()));
    if (this.parts.length === 0) return undefined;
    const b = joinBytes(this.parts);
    this.parts.length = 0;
    return b.length > 0 ? b : undefined;
  }
}
