/**
 * POST /v1/responses served by the chat path: the conversation resolved from the store, translated to a chat
 * request, completed by ChatService (admission, hold, provider, settle, disconnect billing: the core's, not
 * copied), its answer reshaped into the Responses API's object or events, and kept when `store` is not false.
 */
import type { ApiKeyAuth } from "../../auth/apiKeys.ts";
import { ApiError } from "../../errors.ts";
import { log } from "../../log.ts";
import type { RequestTrace } from "../../observe/trace.ts";
import { responseObject } from "../../providers/responses/answer.ts";
import { inputItems, toChatRequest } from "../../providers/responses/request.ts";
import { responsesStream } from "../../providers/responses/stream.ts";
import { TOOLS_LEFT_OUT_HEADER } from "../../providers/responses/tools.ts";
import { type Item, newId, responseFrame, type ResponsesRequest } from "../../providers/responses/wire.ts";
import type { AnswerShape, ChatService, Payer, PayHook } from "../chat/chat.service.ts";
import type { ConversationStore } from "./conversations.ts";

function invalid(message: string): ApiError {
  return new ApiError({ code: "VALIDATION_ERROR", message });
}

/** The checks the chat route's schema makes for chat, made here for the fields the Responses API names otherwise. */
function checkBody(body: unknown): asserts body is ResponsesRequest {
  if (typeof body !== "object" || body === null || Array.isArray(body)) throw invalid("body: must be a JSON object");
  const b = body as Record<string, unknown>;
  if (typeof b.model !== "string" || b.model === "") throw invalid("model: required, a string");
  const cap = b.max_output_tokens;
  if (cap !== undefined && cap !== null && !(Number.isInteger(cap) && (cap as number) >= 1))
    throw invalid("max_output_tokens: must be an integer of at least 1");
  if (b.stream !== undefined && b.stream !== null && typeof b.stream !== "boolean") throw invalid("stream: must be a boolean");
  if (b.tools !== undefined && b.tools !== null && !Array.isArray(b.tools)) throw invalid("tools: must be an array");
}

/** The Responses API front door. */
export class ResponsesService {
  constructor(
    private readonly chat: ChatService,
    private readonly auth: ApiKeyAuth,
    private readonly store: ConversationStore,
  ) {}

  /**
   * `pay`: a paid call's payment, run by the chat core before its hold (see ChatService.complete); `payer`: who pays for
   * a call without a key (a stored conversation needs a key: it is looked up by the key's wallet before anything else).
   */
  async create(authorization: string | null, body: unknown, trace: RequestTrace, pay?: PayHook, payer?: Payer): Promise<Response> {
    checkBody(body);
    let items = inputItems(body.input);
    const chained = body.previous_response_id !== undefined && body.previous_response_id !== null;
    if (chained || items.some((i) => i?.type === "item_reference")) {
      // A stored conversation is the wallet's: the key says whose (and is checked again, cached, by the core).
      const { wallet } = await this.auth.fromHeader(authorization);
      items = await this.store.resolve(wallet, body.previous_response_id, items);
    }
    const { chat: chatBody, tools } = toChatRequest(body, items);
    if (chatBody.messages.length === 0) throw invalid("input: at least one item is required");

    const keep = body.store !== false;
    // A conversation to be stored is checked against the store's bounds first: refused before anything is held. The
    // wallet is the key's (a call without a key stores under its payer's, checked by the store's write alone).
    const stored = keep ? this.store.admit(authorization ? (await this.auth.fromHeader(authorization)).wallet : undefined, items) : [];
    const id = newId("resp");
    const frame = responseFrame(id, body, body.stream === true);
    // The answer is billed and sent whatever happens here, without waiting for the write: it is queued on the
    // wallet's Redis connection before the answer leaves, so a next turn here reads after it, and one on another
    // process that arrives first reads a fresh id again (ConversationStore.read). A conversation that could not be
    // kept is only logged.
    const save = (output: Item[], outputJson: string[], ride = false): void => {
      const wallet = trace.wallet; // known once the core has authenticated the key
      if (!keep || !wallet) return;
      this.store
        .save(wallet, id, stored, output, outputJson, ride)
        .catch((e) => log.warn("responses: conversation not stored", { request_id: trace.id, error: e }));
    };
    let answer: ReturnType<typeof responseObject> | undefined;
    const shape: AnswerShape = {
      json: (chat, parsed) => {
        answer = responseObject(frame, chat, parsed, tools);
        return answer.json;
      },
      // Sent with the stream's settle, in the same write (a stream's writes alone cost a Redis write and read of
      // their own).
      stream: () => responsesStream(frame, (output, json) => save(output, json, true), tools),
    };
    const res = await this.chat.complete(authorization, chatBody, trace, shape, pay, payer);
    // Not with the settle: that could wait for the settle in flight, and a JSON answer's writes already share their
    // write with others (bench).
    if (answer && res.ok) save(answer.output, answer.outputJson);
    // Tools no provider runs on this path (web_search on chat completions) were left out, not refused: said here.
    if (tools.leftOut.length > 0) res.headers.set(TOOLS_LEFT_OUT_HEADER, tools.leftOut.join(", "));
    return res;
  }
}
