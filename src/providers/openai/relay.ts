import { joinBytes, type RelayPart, SseDecoder, type SseRelay } from "../sse.ts";

/** Where a relay's payloads go besides the client, so the stream's translator can count them in order. */
export interface RelaySink {
  /**
   * A relayed event's payload, `buf` from `start` to `end` (a view of it is made only if it is ever read): its
   * output, counted if usage never comes.
   */
  keep(buf: Uint8Array, start: number, end: number): void;
  /** A payload handed over to the translator, in its place among the kept ones. */
  handed(): void;
  /** A new read (or the end): every part of the last one was met. */
  next(): void;
}

const LF = 10;
const CR = 13;
const QUOTE = 34;
const COLON = 58;
const BACKSLASH = 92;
const CLOSE = 125;
const LFLF = Buffer.from("\n\n");
const MODEL_KEY = Buffer.from('"model"');
const USAGE_KEY = Buffer.from('"usage"');
const ERROR_KEY = Buffer.from('"error"');
const DATA_OBJECT = Buffer.from("data: {");
const DATA_NULL = Buffer.from(":null");
const DONE_EVENT = Buffer.from("data: [DONE]");

// For payloads decoded whole (no stream state): one for all streams.
const text = new TextDecoder();

/** A Buffer over `buf`'s bytes (for its indexOf of a byte string), without copying them or touching `buf`. */
function bufferOver(buf: Uint8Array): Buffer {
  // Buffer.from(arrayBuffer, …) costs ~1 µs; a plain view given Buffer's prototype, ~0.1.
  return Object.setPrototypeOf(new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength), Buffer.prototype) as Buffer;
}

// A model id's `"model"` value as bytes (quotes included), made once per id: catalog ids and aliases, a bounded set.
const modelValues = new Map<string, Uint8Array>();
function modelValue(id: string): Uint8Array {
  let v = modelValues.get(id);
  if (v === undefined) {
    if (modelValues.size >= 1024) modelValues.clear();
    modelValues.set(id, (v = new TextEncoder().encode(JSON.stringify(id))));
  }
  return v;
}

/** `buf` holds `what` at `at`. */
function bytesAt(buf: Uint8Array, at: number, what: Uint8Array): boolean {
  if (at + what.length > buf.length) return false;
  for (let i = 0; i < what.length; i++) if (buf[at + i] !== what[i]) return false;
  return true;
}

/**
 * A chat client's stream relayed as the provider's bytes (StreamTranslator.relay): a content chunk in the compact
 * form the translator edits as text (`data: {…}` on one line, one `"model":"…"`, no usage but `:null`, no
 * `"error"`) is passed on with its model's value replaced in the bytes (`modelId`, the id the client asked for) and
 * its payload kept for counting (`sink`); every other event (usage, an error, the end, a comment, spacing, several
 * lines) is handed over as its payload for the translator, as is the whole stream from its first CR on.
 */
export function openaiRelay(modelId: string, sink: RelaySink): SseRelay {
  const toValue = modelValue(modelId);
  let carry: Uint8Array | undefined;
  // From the first CR on (CRLF line ends), the stream is decoded: every payload goes to the translator.
  let decoded: SseDecoder | undefined;
  // Whole events that are not in the relayed form (rare: made when first needed).
  let otherDecoder: SseDecoder | undefined;
  const other = () => (otherDecoder ??= new SseDecoder());

  const events = (buf: Uint8Array, end: number): RelayPart[] => {
    const b = bufferOver(buf);
    const parts: RelayPart[] = [];
    // Where the current run of relayed events starts, and the model values in it to replace (start, end pairs).
    let from = 0;
    const values: number[] = [];
    // The run up to `to` as one array (a view where nothing is replaced); the next one starts at `next`.
    const cut = (to: number, next: number) => {
      if (to > from) {
        if (values.length === 0) parts.push(from === 0 && to === buf.length ? buf : buf.subarray(from, to));
        else {
          let length = to - from;
          for (let i = 0; i < values.length; i += 2) length += toValue.length - (values[i + 1]! - values[i]!);
          const out = new Uint8Array(length);
          let at = 0;
          let start = from;
          for (let i = 0; i < values.length; i += 2) {
            at += b.copy(out, at, start, values[i]);
            out.set(toValue, at);
            at += toValue.length;
            start = values[i + 1]!;
          }
          b.copy(out, at, start, to);
          parts.push(out);
          values.length = 0;
        }
      }
      from = next;
    };
    const hand = (payload: string) => {
      parts.push(payload);
      sink.handed();
    };
    let model = b.indexOf(MODEL_KEY);
    let usage = b.indexOf(USAGE_KEY);
    let error = b.indexOf(ERROR_KEY);
    for (let at = 0; at < end;) {
      const nl = buf.indexOf(LF, at);
      if (nl === at) {
        cut(at, ++at); // a blank line more: it carries nothing
        continue;
      }
      if (buf[nl + 1] !== LF || buf[nl - 1] !== CLOSE || !bytesAt(buf, at, DATA_OBJECT)) {
        // Not one `data: {…}` line: its payloads go to the translator.
        const eventEnd = buf[nl + 1] === LF ? nl + 2 : b.indexOf(LFLF, at) + 2;
        cut(at, eventEnd);
        if (eventEnd === nl + 2 && nl - at === DONE_EVENT.length && bytesAt(buf, at, DONE_EVENT)) hand("[DONE]");
        else for (const p of other().push(buf.subarray(at, eventEnd))) hand(p);
        at = eventEnd;
        continue;
      }
      let plain = true;
      if (usage !== -1 && usage < at) usage = b.indexOf(USAGE_KEY, at);
      for (; usage !== -1 && usage < nl; usage = b.indexOf(USAGE_KEY, usage + 7)) {
        if (!bytesAt(buf, usage + 7, DATA_NULL)) {
          plain = false;
          break;
        }
      }
      if (error !== -1 && error < at) error = b.indexOf(ERROR_KEY, at);
      if (error !== -1 && error < nl) plain = false;
      if (model !== -1 && model < at) model = b.indexOf(MODEL_KEY, at);
      let value = -1;
      let valueEnd = -1;
      if (plain && model !== -1 && model < nl) {
        const next = b.indexOf(MODEL_KEY, model + 7);
        if (buf[model - 1] === BACKSLASH || buf[model + 7] !== COLON || buf[model + 8] !== QUOTE || (next !== -1 && next < nl))
          plain = false;
        else {
          value = model + 8;
          valueEnd = buf.indexOf(QUOTE, value + 1) + 1;
          if (valueEnd === 0 || valueEnd > nl || buf[valueEnd - 2] === BACKSLASH) plain = false;
        }
        model = next;
      }
      if (!plain) {
        cut(at, nl + 2);
        hand(text.decode(buf.subarray(at + 6, nl)));
      } else {
        if (value !== -1 && !(valueEnd - value === toValue.length && bytesAt(buf, value, toValue))) values.push(value, valueEnd);
        sink.keep(buf, at + 6, nl);
      }
      at = nl + 2;
    }
    cut(end, end);
    return parts;
  };

  return {
    push(bytes) {
      sink.next(); // the previous read's parts were all met
      if (decoded) return decoded.push(bytes);
      const buf = carry ? joinBytes([carry, bytes]) : bytes;
      carry = undefined;
      if (buf.indexOf(CR) !== -1) {
        decoded = new SseDecoder();
        return decoded.push(buf);
      }
      const last = buf.lastIndexOf(LF);
      const end = last > 0 && buf[last - 1] === LF ? last + 1 : bufferOver(buf).lastIndexOf(LFLF) + 2;
      if (end < 2) {
        carry = buf.slice();
        return [];
      }
      if (end < buf.length) carry = buf.slice(end);
      return events(buf, end);
    },
    end() {
      sink.next();
      if (decoded) return decoded.end();
      const rest = carry;
      carry = undefined;
      if (!rest) return [];
      const parts = [...other().push(rest), ...other().end()];
      for (const _ of parts) sink.handed();
      return parts;
    },
  };
}
