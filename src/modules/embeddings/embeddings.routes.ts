import { Elysia } from "elysia";
import { traceOf } from "../../observe/trace.ts";
import { body, doc, errors, json, responses, SECURITY } from "../../openapi/document.ts";
import { servePaying } from "../paycall/keyless.ts";
import type { Services } from "../services.ts";

const REQUEST_EXAMPLE = { model: "openai/text-embedding-3-small", input: ["The food was delicious.", "The waiter was rude."] };
const RESPONSE_EXAMPLE = {
  object: "list",
  data: [
    { object: "embedding", index: 0, embedding: [0.0023064255, -0.009327292, 0.015797347] },
    { object: "embedding", index: 1, embedding: [-0.0028842222, 0.0143411, -0.011225175] },
  ],
  model: "openai/text-embedding-3-small",
  usage: { prompt_tokens: 11, total_tokens: 11, charge_usdc: 1 },
};

/**
 * POST /v1/embeddings: OpenAI-compatible embeddings for catalog models of kind "embedding", through the chat path's
 * admission, hold, failover and settle (ChatService.embed), paid calls included.
 */
export const embeddingsRoutes = (s: Services) => {
  const serve = serveEmbeddings(s);
  return new Elysia({ tags: ["embeddings"] }).post("/v1/embeddings", ({ body: input, request }) => serve(input, request), {
    parse: "json", // every body is JSON, whatever Content-Type a client sends
    detail: doc({
      summary: "Embeddings (reserve → provider → settle)",
      description:
        'For catalog models of kind "embedding" (a chat model is 400 naming its endpoint, and the reverse on the chat ' +
        "endpoints). Holds the inputs' bound (each input's bytes + 8 tokens, at most the context window, at the prompt price), " +
        "calls the provider, then charges its usage.prompt_tokens at the prompt price exactly; the answer is the provider's " +
        "(float or base64 embeddings) with usage.charge_usdc. A key's `models` and `requests_per_minute`, catalog `fallbacks` and " +
        "x402 paid calls apply as on chat completions.",
      security: SECURITY.paidCall,
      requestBody: body("EmbeddingsRequest", REQUEST_EXAMPLE),
      responses: responses(
        {
          200: json("EmbeddingsResponse", "The embeddings, in input order", RESPONSE_EXAMPLE, [
            "X-Request-Id",
            "X-RateLimit-Remaining",
            "X-Served-Model",
          ]),
        },
        errors(
          "VALIDATION_ERROR",
          "UNKNOWN_MODEL",
          "UNAUTHORIZED",
          "INSUFFICIENT_BALANCE",
          "KEY_BUDGET_EXCEEDED",
          "MODEL_NOT_ALLOWED",
          "RATE_LIMITED",
          "UPSTREAM_CLIENT_ERROR",
          "INTERNAL_ERROR",
          "UPSTREAM_ERROR",
          "SERVICE_UNAVAILABLE",
          "UPSTREAM_DEADLINE",
          "REQUEST_TIMEOUT",
          "PAYLOAD_TOO_LARGE",
        ),
      ),
    }),
  });
};

/**
 * What POST /v1/embeddings does with a parsed body: a keyless call (on a gateway that takes them), a paid call, or a
 * keyed one. Served by the Elysia route and by the lean door ahead of it (app.ts).
 */
export const serveEmbeddings =
  (s: Services) =>
  (input: unknown, request: Request): Promise<Response> => {
    const trace = traceOf(request);
    return servePaying(s, request, request.headers.get("authorization"), (credential, pay, payer) =>
      s.chat.embed(credential, input, trace, pay, payer),
    );
  };
