/**
 * Upper bound on prompt tokens, from the serialized request: a BPE token always covers at least one byte of
 * text, and the JSON framing around each message (keys, quotes, braces ≥ 28 bytes) exceeds the ~4 tokens of
 * per-message overhead a chat template adds. So the byte length never under-reserves for text prompts.
 */
export function promptTokenBound(serializedBody: string): number {
  return Buffer.byteLength(serializedBody) + 8;
}

/**
 * Token count of generated text when a provider reports no usage: about 4 bytes per token for English,
 * counted at 3 so the estimate errs towards the provider's cost, never towards giving output away.
 */
export function estimateTokens(text: string): number {
  return text.length === 0 ? 0 : Math.ceil(Buffer.byteLength(text) / 3);
}
