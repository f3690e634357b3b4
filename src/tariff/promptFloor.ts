import { ApiError } from "../errors.ts";
import type { Model } from "../providers/catalog.ts";
import type { ChatRequest } from "../providers/types.ts";

// The most characters one token covers, with room: the longest tokens of o200k_base and cl100k_base are 128 bytes
// (runs of spaces), SentencePiece pieces (Gemini, Llama 2, Mistral) are at most 16 characters unless trained
// otherwise. A character is at least one UTF-8 byte, so counting characters never counts more than bytes.
const MAX_TOKEN_CHARS = 256;

/**
 * Fewer tokens than a text can possibly take: one per space-separated word, and one per MAX_TOKEN_CHARS of a
 * longer word. No tokenizer of a catalog provider makes one token of two words: BPE vocabularies split words apart
 * before merging (the pre-tokenizer's regex: a token carries at most one leading space), SentencePiece splits at
 * spaces. Only the space splits words here (a newline or tab joins its neighbours into one longer word, which only
 * lowers the count); spaces themselves, message framing and tool definitions count for nothing. Counting stops
 * once past `stopAbove`.
 */
export function textTokensAtLeast(text: string, stopAbove = Infinity): number {
  let tokens = 0;
  for (let start = 0; start < text.length && tokens <= stopAbove;) {
    let end = text.indexOf(" ", start);
    if (end === -1) end = text.length;
    if (end > start) tokens += Math.ceil((end - start) / MAX_TOKEN_CHARS);
    start = end + 1;
  }
  return tokens;
}

/** A lower bound of a chat request's prompt tokens: its messages' text (string content, text and refusal parts). */
export function promptTokensAtLeast(body: ChatRequest, stopAbove = Infinity): number {
  let tokens = 0;
  const add = (text: unknown) => {
    if (typeof text === "string" && tokens <= stopAbove) tokens += textTokensAtLeast(text, stopAbove - tokens);
  };
  for (const m of body.messages as { content?: unknown }[]) {
    const content = m?.content;
    if (typeof content === "string") add(content);
    else if (Array.isArray(content))
      for (const part of content as { text?: unknown; refusal?: unknown }[]) add(part?.text ?? part?.refusal);
  }
  return tokens;
}

/**
 * A prompt that cannot fit the model's context window is refused (400 VALIDATION_ERROR) before any hold: the
 * bound is a lower one, so a prompt that fits is never refused (one that does not, but looks short to this
 * count, goes on to the provider, which refuses it unbilled). A large max_tokens alone is no reason: it is
 * clamped to the model's maximum output (holdBound.ts), and whatever a provider does when prompt + cap exceed the
 * window (shorten the cap, or refuse unbilled) costs nothing.
 */
export function refuseOverlongPrompt(model: Model, body: ChatRequest): void {
  // Counting stops past the window: a 24 MB prompt costs what its first window's worth of words does.
  if (promptTokensAtLeast(body, model.contextLength) <= model.contextLength) return;
  throw new ApiError({
    code: "VALIDATION_ERROR",
    message: `messages: the prompt is longer than the context window of ${model.id} (${model.contextLength} tokens)`,
  });
}
