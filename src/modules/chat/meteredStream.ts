import type { Ledger } from "../../ledger/ledger.ts";
import type { Usage } from "../../providers/types.ts";
import { SseDecoder } from "../../providers/sse.ts";
import type { ClientFormat, DoorStream, StreamStep, StreamTranslator } from "../../providers/types.ts";
import { estimateUsage } from "../../billing/counted.ts";
import { usageBody } from "../../providers/openai/wire.ts";
import { type Call, upstreamFailed } from "./call.ts";
import type { IdleDeadline } from "./idleDeadline.ts";
import type { Holds } from "../../billing/holds.ts";

const encoder = new TextEncoder();
const DONE = encoder.encode("data: [DONE]\n\n");
/** The spec's StreamErrorEvent: what a chat client reads when the provider failed mid-stream. */
const STREAM_ERROR_EVENT = JSON.stringify({ error: { message: "The model provider failed during the stream", type: "upstream_error" } });
const STREAM_ERROR = encoder.encode(`data: ${STREAM_ERROR_EVENT}\n\ndata: [DONE]\n\n`);
/** A chat client's frames: the spec's StreamErrorEvent on a failure, `data: [DONE]` last whatever happened. */
const CHAT_FORMAT: ClientFormat = { done: DONE, failed: STREAM_ERROR, cut: DONE, usage: usageBody };

/** The stream's final usage chunk (choices empty), as OpenAI sends it when asked with include_usage. */
function usageChunk(call: Call, u: Usage): string {
  const created = Math.floor(Date.now() / 1000);
  return JSON.stringify({
    id: `chatcmpl-${call.holdId}`,
    object: "chat.completion.chunk",
    created,
    model: call.model.id,
    choices: [],
    usage: usageBody(u),
  });
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
  /** The client's body: `data:` chunks, a StreamErrorEvent on a provider failure, `data: [DONE]` last. */
  readonly body: ReadableStream<Uint8Array>;
  /** Resolves when the stream's charge is decided (the access-log line waits for it). */
  readonly ended: Promise<void>;

  private readonly reader: ReadableStreamDefaultReader<Uint8Array>;
  private readonly decoder = new SseDecoder();
  private readonly translate: StreamTranslator;
  /** What the gateway itself writes to the client: chat's frames, or those of the provider's own format. */
  private readonly format: ClientFormat;
  private readonly started = Date.now();
  private usage: Usage | undefined;
  private promptTokens: number | undefined;
  private generated = "";
  /** The hold is settled or released (or about to be): nothing else may resolve it. */
  private resolved = false;
  /**
   * A pull is under way: the client took all it was sent and the gateway waits on the provider. Otherwise output
   * sits unread in the client's queue while the provider keeps generating (and billing) into buffers.
   */
  private reading = false;
  private end!: () => void;
  private client: ReadableStreamDefaultController<Uint8Array> | undefined;
  private readonly keepHold: ReturnType<typeof setInterval> | undefined;
  private readonly cap: ReturnType<typeof setTimeout>;
  private readonly door: DoorStream | undefined;
  /**
   * A door's opening text, sent with the first read's: a body that holds data before the server reads it is
   * pumped through JS by Bun (onReadStreamIntoSinkChunk) rather than natively, for the whole stream.
   */
  private opening: string;

  constructor(
    private readonly call: Call,
    upstream: ReadableStream<Uint8Array>,
    private readonly o: MeterOptions,
  ) {
    this.reader = upstream.getReader();
    this.translate = call.adapter.openStream(o.includeUsage, call.model.id, o.door !== undefined);
    this.format = call.adapter.clientFormat ?? CHAT_FORMAT;
    this.door = o.door;
    this.opening = o.door?.open() ?? "";
    this.ended = new Promise<void>((resolve) => (this.end = resolve));
    // A stream can outlive a hold's lifetime (a long answer, a slow reader): while it runs, its hold is kept from
    // expiring, or the sweeper would hand the credit to other requests and the settle would overdraw.
    // (A request a credit lease admitted has no hold of its own: its lease is renewed while anything is in use.)
    this.keepHold = call.lease
      ? undefined
      : setInterval(() => void o.ledger.extendHold(call.principal, call.holdId).catch(() => {}), o.ledger.holdRefreshMs);
    this.cap = setTimeout(() => void this.timeUp(), o.maxStreamMs);
    this.body = new ReadableStream<Uint8Array>({
      start: (ctrl) => {
        this.client = ctrl;
      },
      pull: (ctrl) => this.pull(ctrl),
      cancel: () => this.cancel(),
    });
  }

  // What the stream has cost so far: the provider's final usage, else its prompt count (if it gave one) or the
  // tokenizer's, plus the tokenizer's count of everything generated (text, reasoning, tool calls).
  private async cost(): Promise<Usage> {
    return this.usage ?? (await estimateUsage(this.call, this.generated + (this.translate.generated?.() ?? ""), this.promptTokens));
  }

  // What a stream stopped early (time cap, client gone) has cost. A client that stopped taking output let the
  // provider generate unseen, up to the hold's completion part (max_tokens clamped × n), and bill it: that part is
  // charged, never less than the provider bills and never above the hold. One that took everything pays what it got.
  private async stoppedCost(): Promise<Usage> {
    if (this.usage || this.reading) return this.cost();
    const counted = await estimateUsage(this.call, "", this.promptTokens);
    return { ...counted, completion_tokens: this.call.bound.completionTokens };
  }

  /** Each pull forwards one upstream read, counted as reading while it waits on the provider. */
  private async pull(ctrl: ReadableStreamDefaultController<Uint8Array>): Promise<void> {
    this.reading = true;
    try {
      await this.forward(ctrl);
    } finally {
      this.reading = false;
    }
  }

  /** One upstream read passed on; the loop only repeats when a read produced nothing to send. */
  private async forward(ctrl: ReadableStreamDefaultController<Uint8Array>): Promise<void> {
    const { deadline } = this.o;
    const door = this.door;
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
      const payloads = read.done ? this.decoder.end() : this.decoder.push(read.value);
      let out = this.opening;
      this.opening = "";
      let done = false;
      let failed = false;
      for (const payload of payloads) {
        let step: StreamStep;
        try {
          step = this.translate(payload);
        } catch {
          step = { failed: true };
        }
        if (step.failed) {
          failed = true;
          break;
        }
        if (step.promptTokens !== undefined) this.promptTokens = step.promptTokens;
        if (step.usage) this.usage = step.usage;
        if (step.generated) this.generated += step.generated;
        if (door) {
          if (step.parsed || step.chunk) out += door.next(step.parsed ?? step.chunk!);
        } else if (step.chunk) out += step.event ? `event: ${step.event}\ndata: ${step.chunk}\n\n` : `data: ${step.chunk}\n\n`;
        if (step.done) done = true;
      }
      // An upstream that closes without its end marker failed mid-answer, unless it already sent its usage.
      const ok = !failed && (done || (read.done && this.usage !== undefined));
      // A door's last events leave with this read's text once the charge is known: one encode, one write.
      if (ok && door) return this.finish(ctrl, true, out);
      // What arrived before a failure in the same read still reaches the client.
      if (out) ctrl.enqueue(encoder.encode(out));
      if (failed || done || read.done) return this.finish(ctrl, ok);
      if (out) return;
    }
  }

  /**
   * The upstream ended (ok) or failed: settle or release, then close the client's stream. `text`: a door's events
   * of the last read, not sent yet (they leave with its last frames).
   */
  private async finish(ctrl: ReadableStreamDefaultController<Uint8Array>, ok: boolean, text = ""): Promise<void> {
    const { deadline, holds } = this.o;
    deadline.close();
    clearInterval(this.keepHold);
    clearTimeout(this.cap);
    if (this.resolved) return; // the client cancelled first; cancel() resolved the hold
    this.resolved = true;
    if (ok) {
      const billed = await this.cost();
      // The stream's end leaves once its charge is on the Redis connection (see settleBehind).
      const onWire = holds.settleBehind(this.call, billed);
      this.door?.settled?.();
      await onWire;
      // The client asked for the usage chunk and the provider sent none: it gets the counted usage it pays for.
      if (this.o.includeUsage && this.usage === undefined) {
        const chunk = usageChunk(this.call, billed);
        if (this.door) text += this.door.next(chunk);
        else ctrl.enqueue(encoder.encode(`data: ${chunk}\n\n`));
      }
    } else {
      // Spec: a provider failure or an idle deadline mid-stream releases the hold; nothing is charged.
      upstreamFailed(this.call, deadline.passed ? "timeout" : "stream_broken", { after_ms: Math.round(Date.now() - this.started) });
      deadline.stop();
      await holds.release(this.call);
    }
    const last = this.door ? this.doorLast(ok ? [] : [STREAM_ERROR_EVENT], text) : ok ? this.format.done : this.format.failed;
    if (ok) await this.door?.stored?.();
    try {
      if (last.length > 0) ctrl.enqueue(last);
      ctrl.close();
    } catch {
      // The client left while the charge (or a door's write) went out: it is resolved above all the same, and the
      // stream's end must still be told (the access-log line waits for it).
    }
    this.end();
  }

  /** A door's last frames after `text`: what it makes of chat's (the StreamErrorEvent on a failure, then `[DONE]`). */
  private doorLast(before: string[], text = ""): Uint8Array {
    let out = this.opening + text;
    this.opening = "";
    for (const payload of before) out += this.door!.next(payload);
    return encoder.encode(out + this.door!.next("[DONE]"));
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
    void this.o.holds.settleBehind(this.call, await this.stoppedCost());
    this.end();
  }

  /**
   * A client that keeps the connection but stops reading would keep it (and the hold) forever: at the time cap the
   * stream ends and is charged what it produced, which the provider bills (releasing it would hand the client that
   * output for free; see stoppedCost); the upstream is stopped once the settle is under way.
   */
  private async timeUp(): Promise<void> {
    this.o.deadline.close();
    clearInterval(this.keepHold);
    if (this.resolved) return;
    this.resolved = true;
    void this.o.holds.settleBehind(this.call, await this.stoppedCost());
    this.end();
    this.o.deadline.stop();
    try {
      const cut = this.door ? this.doorLast([]) : this.format.cut;
      if (cut.length > 0) this.client?.enqueue(cut);
      this.client?.close();
    } catch {
      // the client went away meanwhile
    }
  }
}
