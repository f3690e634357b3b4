import { Elysia } from "elysia";
import { traceOf } from "../../observe/trace.ts";
import { requestBodies } from "../../openapi/docs.ts";
import { doc, errors, responses, SECURITY } from "../../openapi/document.ts";
import type { Services } from "../services.ts";
import type { ChatRequest } from "../../providers/types.ts";
import { servePaying } from "../paycall/keyless.ts";

const RATE_HEADERS = {
  "X-Request-Id": { $ref: "#/components/headers/X-Request-Id" },
  "X-RateLimit-Remaining": { $ref: "#/components/headers/X-RateLimit-Remaining" },
  "X-Served-Model": { $ref: "#/components/headers/X-Served-Model" },
  "PAYMENT-RESPONSE": { $ref: "#/components/headers/PAYMENT-RESPONSE" },
  "X-PAYMENT-RESPONSE": { $ref: "#/components/headers/X-PAYMENT-RESPONSE" },
};

const COMPLETION_EXAMPLE = {
  id: "chatcmpl-123",
  object: "chat.completion",
  created: 1_760_000_000,
  model: "openai/gpt-4o-mini",
  choices: [{ index: 0, message: { role: "assistant", content: "Hello!" }, finish_reason: "stop" }],
  usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 },
};
const STREAM_EXAMPLE =
  'data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1760000000,"model":"openai/gpt-4o-mini","choices":[{"index":0,"delta":{"content":"Hello"}}]}\n\n' +
  "data: [DONE]\n\n";

/**
 * What POST /v1/chat/completions does with a request whose body passed the ChatCompletionRequest schema: a keyless
 * call (on a gateway that takes them), a paid call, or a keyed one. Served by the Elysia route below and by the
 * lean door ahead of it (app.ts), which checks the body with the same schema compiled.
 */
export const serveChat =
  (s: Services) =>
  (body: unknown, request: Request): Promise<Response> => {
    const trace = traceOf(request);
    return servePaying(s, request, request.headers.get("authorization"), (credential, pay, payer) =>
      s.chat.complete(credential, body as ChatRequest, trace, undefined, pay, payer),
    );
  };

/** POST /v1/chat/completions: OpenAI-compatible, JSON or SSE. */
export const chatRoutes = (s: Services) => {
  const serve = serveChat(s);
  return new Elysia({ tags: ["chat"] }).use(requestBodies).post("/v1/chat/completions", ({ body, request }) => serve(body, request), {
    body: "ChatCompletionRequest",
    parse: "json", // every body is JSON (spec), whatever Content-Type a client sends
    detail: doc({
      summary: "Chat completion (reserve → provider → settle)",
      description:
        "Reserves the most the answer can cost, calls the provider, then charges the exact usage (or releases the hold when the " +
        "provider fails). `stream: true` answers text/event-stream: `data:` lines of ChatCompletionChunk, a StreamErrorEvent if the " +
        "provider fails mid-stream, and always `data: [DONE]` last. An upstream rejection (UPSTREAM_CLIENT_ERROR) keeps the " +
        "provider's 4xx status. x402: on a gateway that takes payments, a 402 INSUFFICIENT_BALANCE carries the terms (PAYMENT-REQUIRED header; x402Version and accepts in the body) for the shortfall rounded up to a cent, at least X402_CALL_MIN_USD, in every accepted asset; the same request resent with the key and PAYMENT-SIGNATURE (v2) or X-Payment (v1) credits the wallet of the key, then is answered with PAYMENT-RESPONSE / X-PAYMENT-RESPONSE. A payment that moves nothing is 402 with the reason, one already used 402 PAYMENT_ALREADY_USED (no offer); a payment-identifier id naming another payment is 409 CONFLICT. Without a key (no Authorization, no x-api-key) on such a gateway: 402 PAYMENT_REQUIRED with x402 v2 terms for the hold of the call in PAYMENT-REQUIRED (upto through Permit2, settled after the answer for exactly its charge, reported in PAYMENT-RESPONSE or, on a stream, in an `: x402.settlement` SSE comment before the end; exact through EIP-3009, credited to the wallet of the payer, the call charged from it), or SIGN-IN-WITH-X (x402 sign-in-with-x, CAIP-122/EIP-191) to spend the balance of the wallet; see docs/payments.md.",
      security: SECURITY.paidCall,
      responses: responses(
        {
          200: {
            description: "The completion (JSON), or a stream of chunks (text/event-stream) when stream is true",
            headers: RATE_HEADERS,
            content: {
              "application/json": { schema: { $ref: "#/components/schemas/ChatCompletionResponse" }, example: COMPLETION_EXAMPLE },
              "text/event-stream": {
                schema: {
                  type: "string",
                  description: "Server-sent events: ChatCompletionChunk / StreamErrorEvent payloads, then [DONE]",
                },
                example: STREAM_EXAMPLE,
              },
            },
          },
        },
        errors(
          "VALIDATION_ERROR",
          "UNKNOWN_MODEL",
          "UPSTREAM_CLIENT_ERROR",
          "UNAUTHORIZED",
          "MODEL_NOT_ALLOWED",
          "RATE_LIMITED",
          "INTERNAL_ERROR",
          "UPSTREAM_ERROR",
          "SERVICE_UNAVAILABLE",
          "UPSTREAM_DEADLINE",
          "REQUEST_TIMEOUT",
          "PAYLOAD_TOO_LARGE",
        ),
        {
          402: {
            description: "INSUFFICIENT_BALANCE (with the balance and top-up instructions) or KEY_BUDGET_EXCEEDED",
            headers: { "X-Request-Id": { $ref: "#/components/headers/X-Request-Id" } },
            content: {
              "application/json": {
                schema: {
                  oneOf: [{ $ref: "#/components/schemas/InsufficientBalanceError" }, { $ref: "#/components/schemas/KeyBudgetError" }],
                },
                examples: {
                  INSUFFICIENT_BALANCE: {
                    value: {
                      error: "INSUFFICIENT_BALANCE",
                      message: "Balance cannot cover the estimated cost of this request",
                      available_usdc: 1200,
                      required_usdc: 10_290,
                      topup: { endpoint: "/v1/topup", method: "POST", minimum_usd: 1 },
                    },
                  },
                  KEY_BUDGET_EXCEEDED: {
                    value: {
                      error: "KEY_BUDGET_EXCEEDED",
                      message: "This API key's budget cannot cover the request",
                      key_budget_left_usdc: 0,
                      required_usdc: 10_290,
                    },
                  },
                },
              },
            },
          },
        },
      ),
    }),
  });
};
