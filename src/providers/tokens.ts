import type { ChatRequest } from "./types.ts";

type Encoding = typeof import("gpt-tokenizer/encoding/o200k_base");
let encoding: Promise<Encoding> | undefined;

// Loaded on first use: the ranks take ~0.7 s and ~70 MB, and only answers without provider usage need them.
function tokenizer(): Promise<Encoding> {
  encoding ??= import("gpt-tokenizer/encoding/o200k_base");
  return encoding;
}

// User text may contain "<|endoftext|>" and the like; it is billed as the plain text it is, never refused.
const AS_TEXT = { disallowedSpecial: new Set<string>() };

// The tokenizer's BPE costs the square of a pre-token's length (one 64 KB word: seconds; 80 K CJK characters, which
// have no spaces: minutes), and the tokenizer runs on the serving thread. So text reaches it in pieces of at most
// PIECE characters, cut before a space where one is near (where the tokenizer splits anyway), and no run of non-space
// (or of space) longer than RUN characters reaches it whole: such a run is counted in RUN-character slices (a cut adds
// at most one token, ~2% on unspaced CJK, so the count stays an upper bound). Counting yields the thread every
// SLICE_MS and, past BUDGET_MS of counting for one request, counts the rest as its UTF-8 bytes (a token is at least
// one byte): a count's cost is bounded whatever the input, and a request beside it waits at most about a slice.
const RUN = 64;
const PIECE = 4096;
const LONG_RUN = new RegExp(`\\S{${RUN + 1},}|\\s{${RUN + 1},}`, "g");
const SLICE_MS = 4;
const BUDGET_MS = 500;

/** `at`, moved back one where it would split a surrogate pair. */
function cutAt(text: string, at: number): number {
  const c = text.charCodeAt(at - 1);
  return c >= 0xd800 && c <= 0xdbff ? at - 1 : at;
}

/**
 * Where the piece starting at `from` ends: PIECE on, moved back before a space within the last RUN characters (a
 * space, not a line break: punctuation takes the line breaks after it into its token), else before any white space.
 */
function pieceEnd(text: string, from: number): number {
  const end = from + PIECE;
  if (end >= text.length) return text.length;
  const stop = Math.max(from + 1, end - RUN);
  for (let i = end; i >= stop; i--) if (text.charCodeAt(i) === 32) return i;
  for (let i = end; i >= stop; i--) if (text.charCodeAt(i) <= 32) return i;
  return cutAt(text, end);
}

/** `text` in the pieces the tokenizer is given (see RUN, PIECE), in order; together they are `text`. */
export function* tokenizerPieces(text: string): Generator<string> {
  for (let from = 0; from < text.length;) {
    const to = pieceEnd(text, from);
    const piece = text.slice(from, to);
    let at = 0;
    for (const m of piece.matchAll(LONG_RUN)) {
      if (m.index > at) yield piece.slice(at, m.index);
      const end = m.index + m[0].length;
      for (let i = m.index; i < end;) {
        const j = i + RUN >= end ? end : cutAt(piece, i + RUN);
        yield piece.slice(i, j);
        i = j;
      }
      at = end;
    }
    if (at < piece.length) yield at === 0 ? piece : piece.slice(at);
    from = to;
  }
}

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/** One request's count: its texts added in turn, under one time budget (see SLICE_MS, BUDGET_MS). */
class BoundedCount {
  tokens = 0;
  private busyMs = 0;
  private sliceStart = performance.now();

  constructor(private readonly enc: Encoding) {}

  async add(text: string): Promise<void> {
    if (text.length === 0) return;
    for (const piece of tokenizerPieces(text)) {
      if (this.busyMs >= BUDGET_MS) {
        this.tokens += Buffer.byteLength(piece);
        continue;
      }
      this.tokens += this.enc.countTokens(piece, AS_TEXT);
      const now = performance.now();
      if (now - this.sliceStart >= SLICE_MS) {
        this.busyMs += now - this.sliceStart;
        await nextTurn();
        this.sliceStart = performance.now();
      }
    }
  }
}

/**
 * Tokens of a text with o200k_base (GPT-4o and later), the gateway's count when a provider reports no usage: exact
 * but for long unspaced runs (an upper bound there) and for text past the time budget (its bytes).
 */
export async function countTokens(text: string): Promise<number> {
  if (text.length === 0) return 0;
  const count = new BoundedCount(await tokenizer());
  await count.add(text);
  return count.tokens;
}

// OpenAI's chat format: <|im_start|>role<|im_sep|>content<|im_end|> is 3 tokens around each message, and the
// reply is primed with <|im_start|>assistant<|im_sep|> (3 more); a name costs one more token.
const PER_MESSAGE = 3;
const REPLY_PRIMING = 3;
const PER_NAME = 1;
const PER_TOOL_CALL = 3;
// An image's tokens depend on its size, which the gateway does not fetch: 765 is a 1024×1024 high-detail image
// for GPT-4o (85 + 4 tiles × 170), the common case for an image in a chat.
const PER_IMAGE = 765;

function contentText(content: unknown, images: { n: number }): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  let s = "";
  for (const part of content as Record<string, unknown>[]) {
    if (typeof part?.text === "string") s += part.text;
    else if (part?.type === "image_url") images.n++;
    else if (part) s += JSON.stringify(part); // audio, files: their encoded form, as an upper estimate
  }
  return s;
}

/**
 * Prompt tokens of a chat request counted the way OpenAI's chat format tokenizes it (the cookbook's count):
 * messages with their framing, tool calls in assistant turns, and the tool definitions as JSON. Used only when
 * the provider reports no usage, so that a prompt is billed at its count, not at the reserve's byte bound.
 */
export async function countPromptTokens(body: ChatRequest): Promise<number> {
  const count = new BoundedCount(await tokenizer());
  const images = { n: 0 };
  let tokens = REPLY_PRIMING;
  for (const m of body.messages as Record<string, unknown>[]) {
    tokens += PER_MESSAGE;
    await count.add(String(m.role ?? ""));
    await count.add(contentText(m.content, images));
    if (typeof m.name === "string") {
      tokens += PER_NAME;
      await count.add(m.name);
    }
    if (Array.isArray(m.tool_calls)) {
      for (const c of m.tool_calls as { function?: { name?: unknown; arguments?: unknown } }[]) {
        tokens += PER_TOOL_CALL;
        await count.add(String(c.function?.name ?? ""));
        await count.add(String(c.function?.arguments ?? ""));
      }
    }
    if (typeof m.tool_call_id === "string") await count.add(m.tool_call_id);
  }
  if (Array.isArray(body.tools) && body.tools.length > 0) await count.add(JSON.stringify(body.tools));
  return tokens + count.tokens + images.n * PER_IMAGE;
}
