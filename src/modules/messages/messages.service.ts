import type { ApiKeyAuth } from "../../auth/apiKeys.ts";
import { refusalError } from "../../billing/refusals.ts";
import { ApiError } from "../../errors.ts";
import type { Ledger } from "../../ledger/ledger.ts";
import type { RequestTrace } from "../../observe/trace.ts";
import { messageOf } from "../../providers/anthropic/messagesAnswer.ts";
import { chatRequestOf } from "../../providers/anthropic/messagesRequest.ts";
import { nativeMessagesAdapter } from "../../providers/anthropic/messagesNative.ts";
import { messagesStream } from "../../providers/anthropic/messagesStream.ts";
import type { ClientMessagesRequest } from "../../providers/anthropic/wire.ts";
import { TOOLS_LEFT_OUT_HEADER } from "../../providers/responses/tools.ts";
import { type Catalog, findModel, unknownModelReason } from "../../providers/catalog.ts";
import { countPromptTokens } from "../../providers/tokens.ts";
import type { ChatService, Payer, PayHook } from "../chat/chat.service.ts";

/**
 * The Anthropic Messages API front door: a Messages request becomes a chat-completions request, admitted, held and
 * billed by the chat core like any other. To an OpenAI-type provider that request is sent and its answer (JSON or
 * SSE) rewritten into a Messages answer; to an Anthropic provider the client's own request goes (messagesNative.ts)
 * and the provider's answer comes back as it is, but for the model id: nothing is translated twice.
 */
export class MessagesService {
  constructor(
    private readonly chat: ChatService,
    private readonly auth: ApiKeyAuth,
    private readonly catalog: Catalog,
    private readonly ledger: Ledger,
  ) {}

  /**
   * POST /v1/messages. `authorization` is the Bearer form of the client's key (x-api-key or Authorization); `payer`, for a
   * call without one (ChatService's Payer).
   */
  async create(
    authorization: string | null,
    body: ClientMessagesRequest,
    trace: RequestTrace,
    pay?: PayHook,
    payer?: Payer,
  ): Promise<Response> {
    // Server tools (web search…) have no chat form: where only OpenAI-type providers can serve the request (the model
    // and its fallbacks), they are left out and named in X-Tools-Left-Out; where an Anthropic one may, which would
    // run and bill them, they are refused.
    const model = typeof body?.model === "string" ? findModel(this.catalog, body.model) : undefined;
    const translated = model !== undefined && [model, ...(model.fallbacks ?? [])].every((m) => m.provider.type !== "anthropic");
    const leftOut = translated ? [] : undefined;
    const chat = chatRequestOf(body, false, leftOut);
    const res = await this.chat.complete(
      authorization,
      chat,
      trace,
      {
        json: messageOf,
        stream: () => messagesStream(chat.model),
        native: (model) => (model.provider.type === "anthropic" ? nativeMessagesAdapter(body) : undefined),
      },
      pay,
      payer,
    );
    if (leftOut?.length) res.headers.set(TOOLS_LEFT_OUT_HEADER, leftOut.join(", "));
    return res;
  }

  /**
   * POST /v1/messages/count_tokens: the prompt's tokens as the gateway's tokenizer counts them (an estimate: the
   * provider's own tokenizer may differ). Authenticated and counted against the rate limit, the model checked; nothing held, nothing charged.
   */
  async countTokens(authorization: string | null, body: ClientMessagesRequest): Promise<{ input_tokens: number }> {
    // Counted against the wallet's rate limit like any model call (its key checked in the same script call).
    const counted = await this.ledger.countRequest(await this.auth.fromHeader(authorization));
    if (!counted.ok) throw refusalError(counted);
    const chat = chatRequestOf(body, true);
    if (!findModel(this.catalog, chat.model))
      throw new ApiError({ code: "UNKNOWN_MODEL", message: unknownModelReason(this.catalog, chat.model) });
    return { input_tokens: await countPromptTokens(chat) };
  }
}
