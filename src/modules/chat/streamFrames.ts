import type { ClientFormat, DoorStream, StreamStep, Usage } from "../../providers/types.ts";
import { usageBody } from "../../providers/openai/wire.ts";
import { joinBytes } from "../../providers/sse.ts";
import { billedMicro } from "../../tariff/index.ts";
import type { Call } from "./call.ts";

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
    model: call.asked,
    choices: [],
    usage: usageBody(u, billedMicro(call.model, u)),
  });
}

/**
 * What a metered stream writes to its client: each step as chat's SSE or as a front door translates it
 * (providers/types.ts DoorStream), and the frames that end the stream, so the meter never deals in wire text.
 */
export class StreamFrames {
  /** What the gateway itself writes to the client: chat's frames, or those of the provider's own format. */
  private readonly format: ClientFormat;
  /**
   * A door's opening text, sent with the first read's: a body that holds data before the server reads it is
   * pumped through JS by Bun (onReadStreamIntoSinkChunk) rather than natively, for the whole stream.
   */
  private opening: string;

  constructor(
    call: Call,
    /** A front door's translation of what a chat client would read; none for chat. */
    readonly door: DoorStream | undefined,
  ) {
    this.format = call.adapter.clientFormat ?? CHAT_FORMAT;
    this.opening = door?.open() ?? "";
  }

  /** The door's opening text if it has not left yet (then it leaves with what the caller sends). */
  takeOpening(): string {
    const opening = this.opening;
    this.opening = "";
    return opening;
  }

  /** One translated step's text for the client (may be empty). */
  step(step: StreamStep): string {
    if (this.door) return step.parsed || step.chunk ? this.door.next(step.parsed ?? step.chunk!) : "";
    if (step.chunk) return step.event ? `event: ${step.event}\ndata: ${step.chunk}\n\n` : `data: ${step.chunk}\n\n`;
    return "";
  }

  /** The stream's charge is queued: the door's own writes may leave with it (DoorStream.settled). */
  settled(): void {
    this.door?.settled?.();
  }

  /** The counted usage a client asked for and the provider did not send: its text (a door's, or chat's chunk). */
  usage(call: Call, billed: Usage): string {
    const chunk = usageChunk(call, billed);
    return this.door ? this.door.next(chunk) : `data: ${chunk}\n\n`;
  }

  /**
   * The last frames: the provider's end (ok), else its failure. A door's follow `text` (its last events, not sent
   * yet: what it makes of chat's frames comes after them); chat's frames are fixed, and `text` leaves before them.
   */
  last(ok: boolean, text: string): Uint8Array {
    if (this.door) return this.doorLast(ok ? [] : [STREAM_ERROR_EVENT], text);
    const frames = ok ? this.format.done : this.format.failed;
    return text ? joinBytes([encoder.encode(text), frames]) : frames;
  }

  /** The last frames of a stream stopped at the time cap. */
  cut(): Uint8Array {
    return this.door ? this.doorLast([]) : this.format.cut;
  }

  /** A door's last frames after `text`: what it makes of chat's (the StreamErrorEvent on a failure, then `[DONE]`). */
  private doorLast(before: string[], text = ""): Uint8Array {
    let out = this.opening + text;
    this.opening = "";
    for (const payload of before) out += this.door!.next(payload);
    return encoder.encode(out + this.door!.next("[DONE]"));
  }
}
