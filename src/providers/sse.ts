/**
 * Incremental Server-Sent-Events decoder: feed it bytes as they arrive, get whole `data` payloads back.
 * Handles LF and CRLF, multi-line data fields, comments and events split across network reads.
 */
export class SseDecoder {
  private readonly text = new TextDecoder();
  private buffer = "";
  private data: string[] = [];

  push(bytes: Uint8Array): string[] {
    const buffer = this.buffer + this.text.decode(bytes, { stream: true });
    const out: string[] = [];
    let start = 0;
    // Lines are read in place (no slice per line): a read of many events costs one slice per payload.
    for (let nl = buffer.indexOf("\n"); nl !== -1; nl = buffer.indexOf("\n", start)) {
      const end = nl > start && buffer.charCodeAt(nl - 1) === 13 ? nl - 1 : nl; // CRLF
      if (end === start) {
        if (this.data.length === 1) out.push(this.data[0]!);
        else if (this.data.length > 1) out.push(this.data.join("\n"));
        this.data = [];
      } else if (buffer.startsWith("data:", start)) {
        this.data.push(buffer.slice(buffer.charCodeAt(start + 5) === 32 ? start + 6 : start + 5, end));
      }
      // event:, id:, retry: and ":" comments carry nothing the gateway needs.
      start = nl + 1;
    }
    this.buffer = start === buffer.length ? "" : buffer.slice(start);
    return out;
  }

  /** A final event not followed by a blank line (a server that closed right after it). */
  end(): string[] {
    const rest = this.push(new TextEncoder().encode("\n\n"));
    return rest;
  }
}

/**
 * The string made flat (one buffer) in place, for text used many times in a stream's output: a string built by
 * concatenation is a rope, and every rope holding it copies its pieces again when it is encoded (~12 ns a piece).
 * Reading a character makes JavaScriptCore resolve it (the comparison keeps the read from being optimised away).
 */
export function flat(s: string): string {
  return s.charCodeAt(0) < 0 ? "" : s;
}

/** What a relay hands on from a read: bytes for the client as they are, or an event's data payload for the translator. */
export type RelayPart = Uint8Array | string;

/**
 * A stream's SSE relayed as bytes (StreamTranslator.relay): what reaches the client is the provider's own events,
 * edited at the byte level where they must be, and only the events a translator must read (usage, an error, the
 * end, anything unusual) are handed over as payloads. Whole events only: what follows a read's last blank line
 * waits for the next one.
 */
export interface SseRelay {
  push(bytes: Uint8Array): RelayPart[];
  /** The upstream closed: what it left without a blank line after it. */
  end(): RelayPart[];
}

/** The bytes in one array: the arrays themselves when there is one (or none: an empty array). */
export function joinBytes(parts: Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  n = 0;
  for (const p of parts) {
    out.set(p, n);
    n += p.length;
  }
  return out;
}
