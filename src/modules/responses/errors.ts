/**
 * Errors on the Responses API's route, in OpenAI's shape (`{"error": {"message", "type", "code", "param"}}`) so
 * every OpenAI client shows the message and raises its class for the status. The statuses and codes are the spec's
 * (the one table in src/errors.ts); only the envelope differs, and the two the Responses API names itself.
 */
import { ApiError, HttpError, toOpenaiShape } from "../../errors.ts";
import { log } from "../../log.ts";
import { outageOf } from "../../outage.ts";

/**
 * An error answer in OpenAI's shape, by the one conversion (src/errors.ts toOpenaiShape): the gateway's fields in
 * `extra` (a 402's balance, the top-up hint) sit inside `error`, any other field at the top level.
 */
export function openaiError(
  status: number,
  message: string,
  code: string | null,
  param: string | null = null,
  headers: Record<string, string> = {},
  extra: Record<string, unknown> = {},
): Response {
  return Response.json(toOpenaiShape({ error: code, message, ...extra }, status, param), { status, headers });
}

/** A stored conversation the request names is not there (unknown, expired, another wallet's, or kept with store:false). */
export class StoredItemMissing extends HttpError {
  constructor(
    readonly status: 400 | 404,
    readonly code: "previous_response_not_found" | "item_not_found",
    readonly param: "previous_response_id" | "input",
    message: string,
  ) {
    super(message);
  }

  static response(id: string): StoredItemMissing {
    const shown = id.slice(0, 100);
    return new StoredItemMissing(
      400,
      "previous_response_not_found",
      "previous_response_id",
      `Previous response with id '${shown}' not found. Stored responses expire, are kept only with store:true and only for the wallet that made them; resend the whole conversation in input instead.`,
    );
  }

  static item(id: string): StoredItemMissing {
    const shown = id.slice(0, 100);
    return new StoredItemMissing(
      404,
      "item_not_found",
      "input",
      `Item with id '${shown}' not found. Stored items expire, are kept only with store:true and only for the wallet that made them; resend the item itself in input instead of a reference.`,
    );
  }

  toResponse(): Response {
    return openaiError(this.status, this.message, this.code, this.param);
  }
}

/**
 * A request the store will not keep (docs/operating.md "Stored conversations"): refused 400 before anything is held,
 * so nothing is charged or stored; `store: false` serves it without storing.
 */
export class StoreRefusal extends HttpError {
  readonly status = 400;

  constructor(
    readonly code: "store_item_too_large" | "store_conversation_too_large" | "store_limit_reached" | "stored_inline_data_not_kept",
    readonly param: "input" | "store" | "previous_response_id",
    message: string,
  ) {
    super(message);
  }

  static item(index: number, bytes: number, limit: number): StoreRefusal {
    return new StoreRefusal(
      "store_item_too_large",
      "input",
      `Item ${index} of the conversation is ${bytes} bytes, over the ${limit} bytes one stored item may have; send store: false to use it without storing it.`,
    );
  }

  static conversation(bytes: number, limit: number): StoreRefusal {
    return new StoreRefusal(
      "store_conversation_too_large",
      "input",
      `The conversation is ${bytes} bytes, over the ${limit} bytes one stored conversation may have; send store: false (and the whole conversation in input) to continue it without storing.`,
    );
  }

  static wallet(limits: { walletBytes: number; walletResponses: number; ttlS: number }): StoreRefusal {
    return new StoreRefusal(
      "store_limit_reached",
      "store",
      `This wallet's stored conversations are at their bound (${limits.walletBytes} bytes or ${limits.walletResponses} responses within ${limits.ttlS} s); send store: false, or wait for stored ones to expire.`,
    );
  }

  static inlineData(id: string): StoreRefusal {
    return new StoreRefusal(
      "stored_inline_data_not_kept",
      "previous_response_id",
      `Previous response '${id.slice(0, 100)}' continues a conversation with inline images or files (data: URLs), which are not stored; resend the whole conversation in input instead.`,
    );
  }

  toResponse(): Response {
    return openaiError(this.status, this.message, this.code, this.param);
  }
}

/**
 * Anything thrown while serving the route, in OpenAI's shape: a spec error keeps its status, code, message and
 * headers (Retry-After, the rate limit); an outage is 503; anything else 500, its detail in the log only.
 */
export function renderResponsesError(kind: string | number, error: unknown, markPostgresDown: (e: unknown) => void): Response {
  if (error instanceof StoredItemMissing || error instanceof StoreRefusal) return error.toResponse();
  if (kind === "PARSE" && (error as Error).cause instanceof HttpError)
    return renderResponsesError("UNKNOWN", (error as Error).cause, markPostgresDown);
  if (kind === "PARSE") return openaiError(400, "Body is not valid JSON", "VALIDATION_ERROR");
  if (error instanceof ApiError) return error.toResponse("openai");
  if (error instanceof HttpError) return openaiError(error.status, error.message, null);
  const down = outageOf(error);
  if (down) {
    if (down === "postgres") markPostgresDown(error);
    const e = ApiError.unavailable(1);
    return openaiError(e.status, e.message, e.code, null, e.headers);
  }
  log.error("unhandled error", { route: "/v1/responses", code: kind, error });
  return openaiError(500, "Internal server error", "INTERNAL_ERROR");
}
