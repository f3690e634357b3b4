import { openaiRelay } from "./relay.ts";
import type { Usage } from "../types.ts";
import type { StreamStep, StreamTranslator } from "../types.ts";
import type { AssistantMessage, ChatCompletionChunk, ChunkDelta, StreamError, Usage as WireUsage } from "./wire.ts";

/**
 * The provider's usage when it is whole (two safe non-negative integers), else null. Its cached input
 * (`prompt_tokens_details.cached_tokens`, DeepSeek's `prompt_cache_hit_tokens`; part of prompt_tokens) is billed at
 * the cached price, and its cache writes (`prompt_tokens_details.cache_write_tokens`, also part of prompt_tokens:
 * OpenAI's GPT-6 family writes the prompt to its cache unasked and bills the write) at the cache-write price. Both
 * are bounded by prompt_tokens, so a provider's odd report never bills more prompt tokens than it counted.
 */
export function usageOf(u: Partial<WireUsage> | null | undefined): Usage | null {
  if (!u || typeof u !== "object") return null;
  const { prompt_tokens, completion_tokens } = u;
  if (!Number.isSafeInteger(prompt_tokens) || !Number.isSafeInteger(completion_tokens)) return null;
  if ((prompt_tokens as number) < 0 || (completion_tokens as number) < 0) return null;
  const usage: Usage = { prompt_tokens: prompt_tokens as number, completion_tokens: completion_tokens as number };
  // DeepSeek reports its cache hits as prompt_cache_hit_tokens (also part of prompt_tokens).
  const cached = u.prompt_tokens_details?.cached_tokens ?? u.prompt_cache_hit_tokens;
  if (Number.isSafeInteger(cached) && (cached as number) > 0) usage.cached_prompt_tokens = Math.min(cached as number, usage.prompt_tokens);
  const written = u.prompt_tokens_details?.cache_write_tokens;
  if (Number.isSafeInteger(written) && (written as number) > 0)
    usage.cache_write_tokens = Math.min(written as number, usage.prompt_tokens - (usage.cached_prompt_tokens ?? 0));
  return usage;
}

/** Everything an answer or a chunk generated that the provider bills as output, for counting without usage. */
export function generatedText(part: AssistantMessage | ChunkDelta | undefined): string {
  if (!part) return "";
  let s = typeof part.content === "string" ? part.content : "";
  // DeepSeek names the reasoning reasoning_content, OpenRouter reasoning: both are billed output.
  if (typeof part.reasoning_content === "string") s += part.reasoning_content;
  else if (typeof part.reasoning === "string") s += part.reasoning;
  const calls = part.tool_calls;
  if (Array.isArray(calls)) {
    for (const c of calls) {
      if (typeof c.function?.name === "string") s += c.function.name;
      if (typeof c.function?.arguments === "string") s += c.function.arguments;
    }
  }
  return s;
}

/**
 * The upstream JSON text with its model renamed in place, so an answer (or each chunk of a stream) is not
 * serialised again only for its label. Only when `"model"` occurs once in the text, directly followed by the value
 * parsed from it: then it is the top-level field (a `"model"` inside a string is escaped and never matches).
 * Otherwise undefined, and the caller serialises.
 */
export function renamedModel(text: string, from: unknown, to: string): string | undefined {
  if (typeof from !== "string") return undefined;
  const at = text.indexOf('"model"');
  if (at === -1 || text.indexOf('"model"', at + 7) !== -1) return undefined;
  const pair = `"model":${JSON.stringify(from)}`;
  if (!text.startsWith(pair, at)) return undefined;
  return `${text.slice(0, at)}"model":${JSON.stringify(to)}${text.slice(at + pair.length)}`;
}

/** Every `"key"` in the text is followed by `:null` (or there is none): the chunk carries no such value. */
function onlyNull(text: string, key: string): boolean {
  for (let at = text.indexOf(key); at !== -1; at = text.indexOf(key, at + key.length)) {
    if (!text.startsWith(":null", at + key.length)) return false;
  }
  return true;
}

/** Where the JSON string starting at `open` (a quote) ends: the index of its closing quote, or -1. */
function stringEnd(text: string, open: number): number {
  for (let q = text.indexOf('"', open + 1); q !== -1; q = text.indexOf('"', q + 1)) {
    let slashes = 0;
    while (text.charCodeAt(q - 1 - slashes) === 92) slashes++;
    if (slashes % 2 === 0) return q;
  }
  return -1;
}

// Output kept unread until its text is counted anyway: bounds a long stream's memory when usage may still come.
const UNREAD_CHARS = 64 * 1024;

// For payloads kept as bytes, decoded whole (no stream state): one for all streams.
const text = new TextDecoder();

/**
 * One OpenAI-format stream, chunk by chunk. A content chunk is only edited as text (its model renamed), not
 * parsed: its JSON is needed for billing only when usage never comes, so it is kept aside and its generated text
 * is read only then (`generated`), or once UNREAD_CHARS are waiting. A chunk that may carry usage or an error, or
 * is not in the compact form the edit expects, is parsed whole. The price of not parsing: a payload that looks like
 * an object (`{…}`) but is not JSON reaches the client as sent instead of failing the stream (anything else, an
 * HTML page or a cut-off chunk, still fails it).
 */
export function openOpenaiStream(includeUsage: boolean, modelId: string, door = false): StreamTranslator {
  const to = `"model":${JSON.stringify(modelId)}`;
  // The upstream's last `"model":"…"` pair, and whether it must be renamed (it names another model).
  let seenPair = "";
  let seenRenamed = false;
  // Payloads not read yet, in the order they came: a payload's text, or the relay's as (bytes, start, end).
  let unread: (string | Uint8Array | number)[] = [];
  let unreadChars = 0;
  let counted = "";
  let usageSeen = false;
  // The relay's payloads not counted yet, in the order the reader meets them, three entries each: a relayed event's
  // (bytes, start, end), or (null, 0, 0) for a payload it handed over (the translator counts that one when it reads
  // it, so what came before is taken first). Offsets, not views: most streams bring their usage and never read them.
  let relayed: (Uint8Array | number | null)[] = [];
  let relayedAt = 0;
  /** Relayed payloads into `unread`: up to the next handed-over payload (`all`: every one). */
  const takeRelayed = (all: boolean): void => {
    while (relayedAt < relayed.length) {
      const u = relayed[relayedAt] as Uint8Array | null;
      const start = relayed[relayedAt + 1] as number;
      const end = relayed[relayedAt + 2] as number;
      relayedAt += 3;
      if (u === null) {
        if (all) continue;
        break;
      }
      unread.push(u, start, end);
      unreadChars += end - start;
    }
    if (relayedAt === relayed.length) {
      relayed = [];
      relayedAt = 0;
    }
    if (unreadChars > UNREAD_CHARS) countUnread();
  };

  const countUnread = (): string => {
    for (let i = 0; i < unread.length; i++) {
      const u = unread[i] as string | Uint8Array;
      let p: string;
      if (typeof u === "string") p = u;
      else {
        p = text.decode(u.subarray(unread[i + 1] as number, unread[i + 2] as number));
        i += 2;
      }
      try {
        const obj = JSON.parse(p) as Partial<ChatCompletionChunk>;
        if (Array.isArray(obj.choices)) for (const c of obj.choices) counted += generatedText(c.delta);
      } catch {
        counted += p; // not JSON after all: its text counts whole rather than not at all
      }
    }
    unread = [];
    unreadChars = 0;
    return counted;
  };

  // A chunk read whole: its usage taken, its output counted (until usage came), its usage dropped when the client
  // did not ask for it. No `obj`: a failure, or a usage-only chunk the client did not ask for (nothing to send).
  const read = (payload: string): { obj?: Partial<ChatCompletionChunk & StreamError>; usage?: Usage; failed?: true } => {
    const obj = JSON.parse(payload) as Partial<ChatCompletionChunk & StreamError>;
    if (obj.error) return { failed: true };
    const usage = usageOf(obj.usage) ?? undefined;
    if (usage) {
      usageSeen = true;
      unread = [];
      unreadChars = 0;
      relayed = [];
      relayedAt = 0;
    }
    const choices = Array.isArray(obj.choices) ? obj.choices : [];
    if (!usageSeen) {
      countUnread(); // the text is counted in the order it came
      for (const c of choices) counted += generatedText(c.delta);
    }
    if (usage && !includeUsage) {
      // The client did not ask for usage: drop the usage-only chunk, strip it from a content chunk.
      if (choices.length === 0) return { usage };
      delete obj.usage;
    }
    return { obj, usage };
  };

  // The current translation, for what the text edit does not cover.
  const parsed = (payload: string): StreamStep => {
    const { obj, usage, failed } = read(payload);
    if (!obj) return failed ? { failed } : { usage };
    const renamed = "model" in obj && obj.model !== modelId; // every chunk names the model the client asked for
    if (usage && !includeUsage) {
      if (renamed) obj.model = modelId;
      return { chunk: JSON.stringify(obj), usage };
    }
    if (!renamed) return { chunk: payload, usage };
    return { chunk: renamedModel(payload, obj.model, modelId) ?? JSON.stringify({ ...obj, model: modelId }), usage };
  };

  // A compact content chunk: its model renamed as text, its output kept unread; undefined when it is not one.
  const edited = (payload: string): string | undefined => {
    if (payload.charCodeAt(0) !== 123 || payload.charCodeAt(payload.length - 1) !== 125) return undefined; // { … }
    if (payload.includes('"error"') || !onlyNull(payload, '"usage"')) return undefined;
    const at = payload.indexOf('"model"');
    let chunk = payload;
    if (at !== -1) {
      if (payload.indexOf('"model"', at + 7) !== -1 || payload.charCodeAt(at + 7) !== 58 || payload.charCodeAt(at + 8) !== 34)
        return undefined;
      const end = stringEnd(payload, at + 8);
      if (end === -1) return undefined;
      const pair = payload.slice(at, end + 1);
      if (pair !== seenPair) {
        seenRenamed = JSON.parse(pair.slice(8)) !== modelId;
        seenPair = pair;
      }
      if (seenRenamed) chunk = payload.slice(0, at) + to + payload.slice(end + 1);
    }
    if (!usageSeen) {
      unread.push(payload);
      unreadChars += payload.length;
      if (unreadChars > UNREAD_CHARS) countUnread();
    }
    return chunk;
  };

  const translate = (payload: string): StreamStep => {
    if (relayed.length > 0) takeRelayed(false);
    if (payload === "[DONE]") return { done: true };
    const chunk = edited(payload);
    return chunk === undefined ? parsed(payload) : { chunk };
  };
  // A door reads every chunk's object: each is parsed once, here, and its text is not edited. A payload the chat
  // path would pass on unparsed (`{…}` that is not JSON) goes to the door as text, as it did, and is counted alike.
  const forDoor = (payload: string): StreamStep => {
    if (payload === "[DONE]") return { done: true };
    let r: ReturnType<typeof read>;
    try {
      r = read(payload);
    } catch (e) {
      if (edited(payload) === undefined) throw e;
      return { chunk: payload };
    }
    return r.obj ? { parsed: r.obj, usage: r.usage } : r.failed ? { failed: true } : { usage: r.usage };
  };
  const generated = () => {
    if (usageSeen) return "";
    if (relayed.length > 0) takeRelayed(true);
    return countUnread();
  };
  if (door) return Object.assign(forDoor, { generated });

  // The chat client's stream relayed as the provider's bytes (relay.ts); what it hands over comes back here.
  const relay = () =>
    openaiRelay(modelId, {
      keep(buf, start, end) {
        if (!usageSeen) relayed.push(buf, start, end);
      },
      handed() {
        if (!usageSeen) relayed.push(null, 0, 0);
      },
      next() {
        if (relayed.length > 0) takeRelayed(true);
      },
    });
  return Object.assign(translate, { generated, relay });
}
