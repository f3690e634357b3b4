import type { ProviderAdapter, UpstreamParams } from "../types.ts";
import { anthropicHeaders, MESSAGES_PATH } from "./api.ts";
import { toAnthropicRequest } from "./chatRequest.ts";
import { parseMessage } from "./chatResponse.ts";
import { openAnthropicStream } from "./chatStream.ts";
import { anthropicError } from "./errors.ts";

/** Anthropic's Messages API behind the OpenAI chat-completions interface: translated both ways. */
export const anthropicAdapter: ProviderAdapter = {
  request(p: UpstreamParams) {
    const { payload, hiddenPromptTokens } = toAnthropicRequest(p);
    return {
      url: p.model.provider.baseUrl + MESSAGES_PATH,
      init: { method: "POST", headers: anthropicHeaders(p.model.provider.apiKey), body: JSON.stringify(payload) },
      hiddenPromptTokens,
    };
  },
  parse: parseMessage,
  openStream: openAnthropicStream,
  upstreamError: anthropicError,
};
