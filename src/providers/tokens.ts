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

/** Tokens of a text with o200k_base (GPT-4o and later), the gateway's count when a provider reports no usage. */
export async function countTokens(text: string): Promise<number> {
  if (text.length === 0) return 0;
  return (await tokenizer()).countTokens(text, AS_TEXT);
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
  const enc = await tokenizer();
  const count = (s: string) => (s.length === 0 ? 0 : enc.countTokens(s, AS_TEXT));
  const images = { n: 0 };
  let tokens = REPLY_PRIMING;
  for (const m of body.messages as Record<string, unknown>[]) {
    tokens += PER_MESSAGE + count(String(m.role ?? "")) + count(contentText(m.content, images));
    if (typeof m.name === "string") tokens += PER_NAME + count(m.name);
    if (Array.isArray(m.tool_calls)) {
      for (const c of m.tool_calls as { function?: { name?: unknown; arguments?: unknown } }[]) {
        tokens += PER_TOOL_CALL + count(String(c.function?.name ?? "")) + count(String(c.function?.arguments ?? ""));
      }
    }
    if (typeof m.tool_call_id === "string") tokens += count(m.tool_call_id);
  }
  if (Array.isArray(body.tools) && body.tools.length > 0) tokens += count(JSON.stringify(body.tools));
  return tokens + images.n * PER_IMAGE;
}
