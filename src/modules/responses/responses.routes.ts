import { Elysia } from "elysia";
import { traceOf } from "../../observe/trace.ts";
import { doc, SECURITY } from "../../openapi/document.ts";
import type { Services } from "../services.ts";
import { renderResponsesError } from "./errors.ts";
import { servePaying } from "../paycall/keyless.ts";

const REQUEST_EXAMPLE = { model: "openai/gpt-4o-mini", instructions: "You are terse.", input: "Say hello.", max_output_tokens: 100 };
const RESPONSE_EXAMPLE = {
  id: "resp_67ccd2bed1ec8190b14f964abc054267",
  object: "response",
  created_at: 1_760_000_000,
  status: "completed",
  model: "openai/gpt-4o-mini",
  output: [
    {
      type: "message",
      id: "msg_67ccd2bf17f0819081ff3bb2cf6508e6",
      status: "completed",
      role: "assistant",
      content: [{ type: "output_text", text: "Hello!", annotations: [] }],
    },
  ],
  output_text: "Hello!",
  usage: {
    input_tokens: 9,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: 2,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 11,
  },
};
const STREAM_EXAMPLE =
  'event: response.created\ndata: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[]}}\n\n' +
  'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hello"}\n\n' +
  'event: response.completed\ndata: {"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","object":"response","status":"completed","usage":{"input_tokens":9,"output_tokens":2,"total_tokens":11}}}\n\n';

const OPENAI_ERROR = {
  type: "object",
  required: ["error"],
  properties: {
    error: {
      type: "object",
      required: ["message", "type", "code", "param"],
      properties: {
        message: { type: "string" },
        type: { type: "string" },
        code: { type: ["string", "null"] },
        param: { type: ["string", "null"] },
      },
    },
  },
};
const errorAnswer = (description: string, example: { message: string; type: string; code: string; param: string | null }) => ({
  description,
  headers: { "X-Request-Id": { $ref: "#/components/headers/X-Request-Id" } },
  content: { "application/json": { schema: OPENAI_ERROR, example: { error: example } } },
});

/** POST /v1/responses: the OpenAI Responses API, served by the chat path and billed by the same ledger. */
/**
 * What POST /v1/responses does with a parsed body: a keyless call (on a gateway that takes them), a paid call, or a
 * keyed one. Served by the Elysia route below and by the lean door ahead of it (app.ts), with `responsesError`.
 */
export const serveResponses =
  (s: Services) =>
  (body: unknown, request: Request): Promise<Response> => {
    const trace = traceOf(request);
    return servePaying(s, request, request.headers.get("authorization"), (credential, pay, payer) =>
      s.responses.create(credential, body, trace, pay, payer),
    );
  };

/** The route's answer to an error (`code`: Elysia's kind of it), in OpenAI's shape, counted under its status. */
export const responsesError =
  (s: Services) =>
  (code: string | number, error: unknown, request: Request): Response => {
    const res = renderResponsesError(code, s.paidCalls.offerOn(error, request), (e) => s.pgHealth.markDown(e));
    traceOf(request).status = res.status;
    return res;
  };

export const responsesRoutes = (s: Services) => {
  const serve = serveResponses(s);
  const fail = responsesError(s);
  return (
    new Elysia({ tags: ["responses"] })
      // Registered before the app's own error handler, so this route's errors keep OpenAI's shape (Elysia runs the
      // first handler that answers).
      .onError(({ code, error, request }) => fail(code, error, request))
      .post("/v1/responses", ({ body, request }) => serve(body, request), {
        parse: "json", // every body is JSON, whatever Content-Type a client sends
        detail: doc({
          summary: "OpenAI Responses API (reserve → provider → settle, as chat)",
          description:
            "The Responses API for every catalog model, whatever its provider: `input` (a string or items: messages, function_call, " +
            "function_call_output, custom_tool_call, custom_tool_call_output, additional_tools, item_reference), `instructions`, " +
            "`max_output_tokens` (the hold's cap), `tools` (function and custom tools, with those of additional_tools items), " +
            "`tool_choice`, `text.format`, `reasoning`, `stream`. A `namespace` of function tools (Codex's) goes to the provider as flat function " +
            "tools and each call comes back with its `namespace` and the tool's own name; a custom tool goes as a function of one string, " +
            "`input`, and its call comes back as a custom_tool_call with that input. Tools a provider runs itself (`web_search`, " +
            "`file_search`, …) cannot run on this translated path: they are left out of the upstream request, not refused, and the " +
            "`X-Tools-Left-Out` header names them. A catalog model's `aliases` answer here too, the response naming the alias. " +
            "Billed exactly as /v1/chat/completions. Unless `store` is false the " +
            "response is kept for RESPONSES_STORE_TTL_S (default 1 h), readable only by the same wallet, so `previous_response_id` and " +
            "`item_reference` continue it; an unknown or expired id is 400 previous_response_not_found / 404 item_not_found (resend the " +
            "conversation). `stream: true` answers the Responses events, ending with response.completed (with the usage) or " +
            "response.failed. Errors use OpenAI's shape `{error: {message, type, code, param}}` with the spec's codes and statuses. x402: on a gateway that takes payments, a 402 INSUFFICIENT_BALANCE carries the terms (PAYMENT-REQUIRED header; x402Version and accepts in the body) for the shortfall rounded up to a cent, at least X402_CALL_MIN_USD, in every accepted asset; the same request resent with the key and PAYMENT-SIGNATURE (v2) or X-Payment (v1) credits the wallet of the key, then is answered with PAYMENT-RESPONSE / X-PAYMENT-RESPONSE. A payment that moves nothing is 402 with the reason, one already used 402 PAYMENT_ALREADY_USED (no offer); a payment-identifier id naming another payment is 409 CONFLICT. Without a key (no Authorization, no x-api-key) on such a gateway: 402 PAYMENT_REQUIRED with x402 v2 terms for the hold of the call in PAYMENT-REQUIRED (upto through Permit2, settled after the answer for exactly its charge, reported in PAYMENT-RESPONSE or, on a stream, in an `: x402.settlement` SSE comment before the end; exact through EIP-3009, credited to the wallet of the payer, the call charged from it), or SIGN-IN-WITH-X (x402 sign-in-with-x, CAIP-122/EIP-191) to spend the balance of the wallet; see docs/payments.md.",
          security: SECURITY.paidCall,
          requestBody: {
            required: true,
            content: {
              "application/json": {
                schema: {
                  type: "object",
                  required: ["model"],
                  properties: {
                    model: { type: "string" },
                    input: {},
                    stream: { type: "boolean" },
                    store: { type: "boolean" },
                    previous_response_id: { type: "string" },
                    max_output_tokens: { type: "integer", minimum: 1 },
                  },
                },
                example: REQUEST_EXAMPLE,
              },
            },
          },
          responses: {
            200: {
              description: "The response object (JSON), or its events (text/event-stream) when stream is true",
              headers: {
                "X-Request-Id": { $ref: "#/components/headers/X-Request-Id" },
                "X-RateLimit-Remaining": { $ref: "#/components/headers/X-RateLimit-Remaining" },
                "X-Served-Model": { $ref: "#/components/headers/X-Served-Model" },
                "X-Tools-Left-Out": {
                  description:
                    "The types of the request's tools left out of the upstream request (a provider would run them), comma-separated",
                  schema: { type: "string", examples: ["web_search"] },
                },
              },
              content: {
                "application/json": {
                  schema: {
                    type: "object",
                    required: ["id", "object", "status", "output"],
                    properties: {
                      id: { type: "string" },
                      object: { const: "response" },
                      status: { type: "string" },
                      output: { type: "array" },
                    },
                  },
                  example: RESPONSE_EXAMPLE,
                },
                "text/event-stream": {
                  schema: { type: "string", description: "Server-sent Responses API events" },
                  example: STREAM_EXAMPLE,
                },
              },
            },
            400: errorAnswer("VALIDATION_ERROR, UNKNOWN_MODEL, UPSTREAM_CLIENT_ERROR or previous_response_not_found", {
              message: "Previous response with id 'resp_1' not found. …",
              type: "invalid_request_error",
              code: "previous_response_not_found",
              param: "previous_response_id",
            }),
            401: errorAnswer("UNAUTHORIZED", {
              message: "Missing or invalid credentials",
              type: "authentication_error",
              code: "UNAUTHORIZED",
              param: null,
            }),
            402: errorAnswer("INSUFFICIENT_BALANCE or KEY_BUDGET_EXCEEDED", {
              message: "Balance cannot cover the estimated cost of this request",
              type: "insufficient_balance",
              code: "INSUFFICIENT_BALANCE",
              param: null,
            }),
            403: errorAnswer("MODEL_NOT_ALLOWED: the key was created with a models list that does not name this model", {
              message: 'This API key may not call model "openai/gpt-4o"',
              type: "permission_error",
              code: "MODEL_NOT_ALLOWED",
              param: null,
            }),
            404: errorAnswer("item_not_found: an item_reference names no stored item", {
              message: "Item with id 'msg_1' not found. …",
              type: "invalid_request_error",
              code: "item_not_found",
              param: "input",
            }),
            429: errorAnswer("RATE_LIMITED or the provider's UPSTREAM_CLIENT_ERROR", {
              message: "Rate limit of 600 requests per 60 s exceeded",
              type: "rate_limit_error",
              code: "RATE_LIMITED",
              param: null,
            }),
            502: errorAnswer("UPSTREAM_ERROR", {
              message: "The model provider failed to answer",
              type: "server_error",
              code: "UPSTREAM_ERROR",
              param: null,
            }),
            504: errorAnswer("UPSTREAM_DEADLINE", {
              message: "The model provider did not answer within the deadline",
              type: "server_error",
              code: "UPSTREAM_DEADLINE",
              param: null,
            }),
          },
        }),
      })
  );
};
