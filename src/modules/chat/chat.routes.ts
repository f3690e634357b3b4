import { Elysia, t } from "elysia";
import type { Services } from "../../services.ts";
import type { ChatRequest } from "../../providers/types.ts";
import { ErrorBody } from "../schemas.ts";

const Message = t.Object(
  {
    role: t.Union([t.Literal("system"), t.Literal("user"), t.Literal("assistant"), t.Literal("tool"), t.Literal("developer")]),
    // A string per the spec; content parts and null (assistant tool calls) are what OpenAI clients also send.
    content: t.Union([t.String(), t.Array(t.Any()), t.Null()]),
  },
  { additionalProperties: true },
);

// Elysia's t.Integer is a string-coercing transform, which makes Elysia run TypeBox's Decode over every body
// (4% of the gateway's CPU under load); a JSON body needs no coercion, so integers are numbers with multipleOf 1.
const Int = (min: number, max: number) => t.Number({ minimum: min, maximum: max, multipleOf: 1 });

/** ChatCompletionRequest of the spec; unknown fields pass through to the provider. */
export const ChatCompletionRequest = t.Object(
  {
    model: t.String({ minLength: 1, maxLength: 256 }),
    messages: t.Array(Message, { minItems: 1 }),
    max_tokens: t.Optional(Int(1, 10_000_000)),
    max_completion_tokens: t.Optional(Int(1, 10_000_000)),
    temperature: t.Optional(t.Number({ minimum: 0, maximum: 2 })),
    top_p: t.Optional(t.Number({ minimum: 0, maximum: 1 })),
    stream: t.Optional(t.Boolean()),
    n: t.Optional(Int(1, 128)),
    tools: t.Optional(t.Array(t.Record(t.String(), t.Any()))),
    tool_choice: t.Optional(t.Union([t.String(), t.Record(t.String(), t.Any())])),
    stream_options: t.Optional(t.Object({ include_usage: t.Optional(t.Boolean()) }, { additionalProperties: true })),
  },
  { additionalProperties: true },
);

/** POST /v1/chat/completions: OpenAI-compatible, JSON or SSE. */
export const chatRoutes = (s: Services) =>
  new Elysia({ tags: ["chat"] }).post(
    "/v1/chat/completions",
    ({ body, request }) => s.chat.complete(request.headers.get("authorization"), body as ChatRequest),
    {
      body: ChatCompletionRequest,
      parse: "json", // every body is JSON (spec), whatever Content-Type a client sends

      response: { 400: ErrorBody, 401: ErrorBody, 402: ErrorBody, 429: ErrorBody, 502: ErrorBody, 504: ErrorBody },
      detail: { summary: "Chat completion (reserve → provider → settle)", security: [{ bearer: [] }] },
    },
  );
