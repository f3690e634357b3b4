import { log } from "../log.ts";
import type { Model } from "../providers/catalog.ts";
import { countPromptTokens, countTokens } from "../providers/tokens.ts";
import type { CacheTokens, ChatRequest, Usage } from "../providers/types.ts";
import type { ReserveBound } from "./hold.ts";

/** What counting a request's usage needs: the request, its model and what its hold covers. */
export interface CountedCall {
  body: ChatRequest;
  model: Model;
  bound: ReserveBound;
}

/**
 * Usage when the provider reported none: the prompt as the provider counted it (Anthropic's message_start) or
 * as the tokenizer counts it, and the generated text counted by the tokenizer. The gateway's own counts never
 * exceed the reserve's bounds: the provider cannot bill more than those, so a count above them (another
 * vendor's tokenizer, an image counted at a typical size) is the estimate's error. Never throws: should
 * counting fail, the bounds themselves are billed.
 */
export async function estimateUsage(
  call: CountedCall,
  generated: string,
  promptTokens?: number,
  promptCache?: CacheTokens,
): Promise<Usage> {
  const { promptTokens: promptBound, completionTokens: completionBound } = call.bound;
  // The provider's own prompt count comes with its cache split (Anthropic's message_start), billed at its prices.
  const cache = promptTokens !== undefined ? promptCache : undefined;
  try {
    return {
      prompt_tokens: promptTokens ?? Math.min(await countPromptTokens(call.body), promptBound),
      completion_tokens: Math.min(await countTokens(generated), completionBound),
      ...cache,
    };
  } catch (e) {
    log.error("token count failed; billing the upper bounds", { model: call.model.id, error: e });
    return {
      prompt_tokens: promptTokens ?? promptBound,
      completion_tokens: Math.min(Buffer.byteLength(generated), completionBound),
      ...cache,
    };
  }
}
