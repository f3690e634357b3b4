import { Elysia } from "elysia";
import { traceOf } from "../../observe/trace.ts";
import { doc, SECURITY } from "../../openapi/document.ts";
import { messagesErrorBody } from "../../providers/anthropic/messagesError.ts";
import type { ClientMessagesRequest } from "../../providers/anthropic/wire.ts";
import type { Services } from "../services.ts";
import { MessagesService } from "./messages.service.ts";
import { servePaying } from "../paycall/keyless.ts";

/**
 * The client's key in the Bearer form the key check reads: Anthropic's SDK 0.x and the AI SDK send `x-api-key`,
 * the SDK 1.x `Authorization: Bearer`. `anthropic-version` and `anthropic-beta` are accepted whatever they say.
 */
function credentialOf(headers: Headers): string | null {
  const key = headers.get("x-api-key");
  return key ? `Bearer ${key.trim()}` : headers.get("authorization");
}

/**
 * Every error these routes answer (thrown by the core, a body refused while read, a dependency down) leaves the
 * app's one error renderer in the spec's shape; here it is rewritten into Anthropic's, status and headers
 * (Retry-After, rate limits, request id) kept, so each SDK raises its matching error class with the message.
 */
export function inAnthropicShape(response: unknown): Promise<Response> | undefined {
  // Synchronous for the answers it leaves alone: a mapper's promise, even of nothing, would replace them.
  if (!(response instanceof Response) || response.status < 400) return undefined;
  return rewritten(response);
}

async function rewritten(response: Response): Promise<Response> {
  let message = "Error";
  let x402: { x402Version: unknown; accepts: unknown } | undefined;
  try {
    const body = (await response.clone().json()) as { message?: unknown; error?: unknown; x402Version?: unknown; accepts?: unknown };
    message = String(body.message ?? body.error ?? message);
    // A 402's x402 terms stay beside Anthropic's error object, for x402 v1 clients (v2 read PAYMENT-REQUIRED).
    if (body.x402Version !== undefined) x402 = { x402Version: body.x402Version, accepts: body.accepts };
  } catch {
    // not the spec's JSON: the status says it all
  }
  const headers = new Headers(response.headers);
  headers.delete("content-length");
  headers.set("content-type", "application/json");
  const text = messagesErrorBody(response.status, message);
  const body = x402 ? JSON.stringify({ ...JSON.parse(text), ...x402 }) : text;
  return new Response(body, { status: response.status, headers });
}

const ERROR_SCHEMA = {
  type: "object",
  required: ["type", "error"],
  properties: {
    type: { type: "string", enum: ["error"] },
    error: { type: "object", required: ["type", "message"], properties: { type: { type: "string" }, message: { type: "string" } } },
  },
};
const error = (description: string, type: string, message: string) => ({
  description,
  content: { "application/json": { schema: ERROR_SCHEMA, example: { type: "error", error: { type, message } } } },
});
const ERRORS = {
  400: error(
    "invalid_request_error: a request the gateway or the provider refuses, an unknown model, max_tokens missing",
    "invalid_request_error",
    "max_tokens: Field required (a positive integer)",
  ),
  401: error(
    "authentication_error: missing or invalid key (x-api-key or Authorization: Bearer)",
    "authentication_error",
    "Missing or invalid credentials",
  ),
  402: error(
    "billing_error: the balance or the key's budget cannot cover the request",
    "billing_error",
    "Balance cannot cover the estimated cost of this request",
  ),
  403: error(
    "permission_error: MODEL_NOT_ALLOWED, the key was created with a models list that does not name this model",
    "permission_error",
    'This API key may not call model "claude/claude-opus-4-7"',
  ),
  429: error(
    "rate_limit_error: the wallet's rate limit (Retry-After) or the provider's",
    "rate_limit_error",
    "Rate limit of 600 requests per 60 s exceeded",
  ),
  502: error("api_error: the provider failed", "api_error", "The model provider failed to answer"),
  503: error(
    "overloaded_error: the gateway cannot serve now; retry",
    "overloaded_error",
    "The service is temporarily unavailable; try again shortly",
  ),
  504: error(
    "timeout_error: the provider did not answer in time",
    "timeout_error",
    "The model provider did not answer within the deadline",
  ),
};
const MESSAGE_EXAMPLE = {
  id: "msg_01XFDUDYJgAACzvnptvVoYEL",
  type: "message",
  role: "assistant",
  model: "anthropic/claude-sonnet-4-5",
  content: [{ type: "text", text: "Hello!" }],
  stop_reason: "end_turn",
  stop_sequence: null,
  usage: { input_tokens: 12, output_tokens: 3, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
};
const REQUEST_BODY = {
  required: true,
  content: {
    "application/json": {
      schema: {
        type: "object",
        required: ["model", "messages"],
        additionalProperties: true,
        properties: {
          model: { type: "string" },
          max_tokens: { type: "integer", minimum: 1 },
          messages: { type: "array" },
          stream: { type: "boolean" },
        },
      },
      example: { model: "anthropic/claude-sonnet-4-5", max_tokens: 1024, messages: [{ role: "user", content: "Hello" }] },
    },
  },
};

/**
 * What POST /v1/messages does with a request whose body parsed (the answer before the route's Anthropic-shape
 * mapper): served by the Elysia route below and by the lean door ahead of it (app.ts), which puts its answers
 * through `inAnthropicShape` as the route's mapper does.
 */
export const serveMessages = (s: Services) => {
  const messages = new MessagesService(s.chat, s.apiKeyAuth, s.config.catalog, s.ledger);
  return (body: unknown, request: Request): Promise<Response> =>
    servePaying(s, request, credentialOf(request.headers), (credential, pay, payer) =>
      messages.create(credential, body as ClientMessagesRequest, traceOf(request), pay, payer),
    );
};

/** POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API, on the same ledger as chat. */
export const messagesRoutes = (s: Services) => {
  const messages = new MessagesService(s.chat, s.apiKeyAuth, s.config.catalog, s.ledger);
  const serve = serveMessages(s);
  return new Elysia({ tags: ["messages"] })
    .mapResponse({ as: "local" }, ({ response }) => inAnthropicShape(response))
    .post("/v1/messages", ({ body, request }) => serve(body, request), {
      parse: "json",
      detail: doc({
        summary: "Anthropic Messages API (reserve → provider → settle), any model of the catalog",
        description:
          "Anthropic's Messages API for every catalog model, held and billed exactly as POST /v1/chat/completions is. To an " +
          "Anthropic-type provider the request goes as sent (model and max_tokens as held, cache_control breakpoints kept; fields that " +
          "could raise the bill left out) and its answer comes back as it is but for `model`, billed input_tokens, cache reads and " +
          "writes (each at the catalog's cache prices) and output_tokens; to any other it is translated to a chat completion and back, " +
          "its usage what was billed. Every usage carries `charge_usdc`, the µUSDC charged. " +
          "`stream: true` answers Anthropic's events (message_start, content_block_*, message_delta with the usage, message_stop; an " +
          "`error` event if the provider fails mid-stream, the hold then released). Authenticated by x-api-key or Authorization: Bearer; " +
          'errors are Anthropic\'s {type: "error", error: {type, message}}. x402: on a gateway that takes payments, a 402 INSUFFICIENT_BALANCE carries the terms (PAYMENT-REQUIRED header; x402Version and accepts in the body) for the shortfall rounded up to a cent, at least X402_CALL_MIN_USD, in every accepted asset; the same request resent with the key and PAYMENT-SIGNATURE (v2) or X-Payment (v1) credits the wallet of the key, then is answered with PAYMENT-RESPONSE / X-PAYMENT-RESPONSE. A payment that moves nothing is 402 with the reason, one already used 402 PAYMENT_ALREADY_USED (no offer); a payment-identifier id naming another payment is 409 CONFLICT. Without a key (no Authorization, no x-api-key) on such a gateway: 402 PAYMENT_REQUIRED with x402 v2 terms for the hold of the call in PAYMENT-REQUIRED (upto through Permit2, settled after the answer for exactly its charge, reported in PAYMENT-RESPONSE or, on a stream, in an `: x402.settlement` SSE comment before the end; exact through EIP-3009, credited to the wallet of the payer, the call charged from it), or SIGN-IN-WITH-X (x402 sign-in-with-x, CAIP-122/EIP-191) to spend the balance of the wallet; see docs/payments.md.',
        security: SECURITY.paidCall,
        requestBody: REQUEST_BODY,
        responses: {
          200: {
            description: "A Messages object (JSON), or Anthropic's event stream (text/event-stream) when stream is true",
            content: {
              "application/json": {
                schema: { type: "object", required: ["id", "type", "role", "content", "usage"] },
                example: MESSAGE_EXAMPLE,
              },
              "text/event-stream": { schema: { type: "string" } },
            },
          },
          ...ERRORS,
        },
      }),
    })
    .post(
      "/v1/messages/count_tokens",
      ({ body, request }) => messages.countTokens(credentialOf(request.headers), body as ClientMessagesRequest),
      {
        parse: "json",
        detail: doc({
          summary: "Count a Messages request's input tokens (an estimate; nothing is charged)",
          security: [SECURITY.apiKey],
          requestBody: REQUEST_BODY,
          responses: {
            200: {
              description: "The prompt's tokens, counted with the gateway's tokenizer (the provider's own count may differ)",
              content: {
                "application/json": {
                  schema: { type: "object", required: ["input_tokens"], properties: { input_tokens: { type: "integer" } } },
                  example: { input_tokens: 42 },
                },
              },
            },
            400: ERRORS[400],
            401: ERRORS[401],
          },
        }),
      },
    );
};
