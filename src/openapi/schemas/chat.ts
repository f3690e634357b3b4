import { type TSchema, Type as T } from "@sinclair/typebox";
import { closed, Enum, Int, ref } from "./common.ts";

/** What an API-key client sees: health, the model list, chat completions (whole and streamed). */

const ChatMessage = T.Object(
  {
    role: T.Union([T.Literal("system"), T.Literal("user"), T.Literal("assistant"), T.Literal("tool"), T.Literal("developer")]),
    // A string per the spec; content parts and null (assistant tool calls) are what OpenAI clients also send.
    content: T.Union([T.String(), T.Array(T.Any()), T.Null()]),
  },
  { additionalProperties: true },
);

/** Also what Elysia validates a chat request with (REQUEST_BODIES). */
export const ChatCompletionRequest = T.Object(
  {
    model: T.String({ minLength: 1, maxLength: 256, description: "Model id from GET /v1/models", examples: ["openai/gpt-4o-mini"] }),
    messages: T.Array(ChatMessage, { minItems: 1 }),
    max_tokens: T.Optional(T.Integer({ minimum: 1, maximum: 10_000_000, description: "Basis of the balance reserve; default 1024" })),
    max_completion_tokens: T.Optional(T.Integer({ minimum: 1, maximum: 10_000_000, description: "OpenAI's newer name for max_tokens" })),
    temperature: T.Optional(T.Number({ minimum: 0, maximum: 2 })),
    top_p: T.Optional(T.Number({ minimum: 0, maximum: 1 })),
    stream: T.Optional(T.Boolean({ description: "true answers text/event-stream; default false" })),
    n: T.Optional(T.Integer({ minimum: 1, maximum: 128 })),
    tools: T.Optional(T.Array(T.Record(T.String(), T.Any()))),
    tool_choice: T.Optional(T.Union([T.String(), T.Record(T.String(), T.Any())])),
    stream_options: T.Optional(T.Object({ include_usage: T.Optional(T.Boolean()) }, { additionalProperties: true })),
  },
  { additionalProperties: true, description: "OpenAI-compatible; further fields (stop, seed, response_format …) go to the provider" },
);

/** The serving schemas, in the order the document lists them. */
export const CHAT_SCHEMAS = {
  Health: T.Object(
    {
      status: Enum(["ok", "degraded"]),
      redis: Enum(["up", "down"]),
      postgres: Enum(["up", "down"]),
    },
    closed,
  ),
  Model: T.Object(
    {
      id: T.String({ description: "<provider>/<model_name>" }),
      object: T.Literal("model"),
      name: T.String(),
      provider: T.String(),
      contextLength: Int("Context window, tokens"),
      promptPricePer1MTokens: T.Number({ description: "USD per 1M prompt tokens (the billed rate)" }),
      completionPricePer1M: T.Number({ description: "USD per 1M completion tokens (the billed rate)" }),
      cachedPromptPricePer1M: T.Optional(
        T.Number({ description: "Extension: USD per 1M prompt tokens read from the provider's cache; absent: the prompt price" }),
      ),
      cacheWritePricePer1M: T.Optional(
        T.Number({
          description: "Extension: USD per 1M prompt tokens written to the provider's cache for 5 minutes; absent: the prompt price",
        }),
      ),
      cacheWrite1hPricePer1M: T.Optional(
        T.Number({
          description: "Extension: USD per 1M prompt tokens written to the provider's cache for 1 hour; absent: the prompt price",
        }),
      ),
      longContext: T.Optional(
        T.Object(
          {
            aboveTokens: Int("Prompt tokens (cache reads and writes included) past which the whole request bills at this tier"),
            promptPricePer1MTokens: T.Number(),
            completionPricePer1M: T.Number(),
            cachedPromptPricePer1M: T.Optional(T.Number()),
            cacheWritePricePer1M: T.Optional(T.Number()),
            cacheWrite1hPricePer1M: T.Optional(T.Number()),
          },
          {
            ...closed,
            description:
              "Extension: a long-context tier: a request whose prompt is longer than aboveTokens is billed at these prices (USD per 1M tokens) for every token",
          },
        ),
      ),
      aliases: T.Array(T.String(), {
        description: "Extension: other names the model answers to on every route (an agent's own default ids), billed as this model",
      }),
      kind: T.Union([T.Literal("chat"), T.Literal("embedding")], {
        description: "Extension: chat (chat completions, Responses, Messages) or embedding (POST /v1/embeddings)",
      }),
      available: T.Boolean({
        description:
          "Extension: false while the model's provider (a keyless local server) did not answer its last reachability probe; keyed providers are not probed",
      }),
    },
    closed,
  ),
  ModelList: T.Object({ object: T.Literal("list"), data: T.Array(ref("Model")) }, closed),
  ChatMessage,
  ChatCompletionRequest,
  ChatCompletionUsage: T.Object(
    {
      prompt_tokens: Int(),
      completion_tokens: Int(),
      total_tokens: Int(),
      prompt_tokens_details: T.Optional(
        T.Object(
          {
            cached_tokens: Int("Of prompt_tokens: read from the provider's cache, billed at the cached price"),
            cache_write_tokens: T.Optional(Int("Of prompt_tokens: written to the provider's cache, billed at the write price")),
          },
          { additionalProperties: true },
        ),
      ),
      charge_usdc: Int("Extension: the µUSDC charged for this request (the balance change)"),
    },
    { additionalProperties: true, description: "The usage the answer is billed at" },
  ),
  ChatCompletionResponse: T.Object(
    {
      id: T.String(),
      object: T.String({ examples: ["chat.completion"] }),
      created: T.Optional(T.Integer()),
      model: T.String(),
      choices: T.Array(
        T.Object(
          { index: Int(), message: ref("ChatMessage"), finish_reason: T.Union([T.String(), T.Null()]) },
          { additionalProperties: true },
        ),
      ),
      usage: ref("ChatCompletionUsage"),
    },
    { additionalProperties: true },
  ),
  ChatCompletionChunk: T.Object(
    {
      id: T.String(),
      object: T.Literal("chat.completion.chunk"),
      created: T.Integer(),
      model: T.String(),
      choices: T.Array(T.Object({ index: Int(), delta: T.Record(T.String(), T.Any()) }, { additionalProperties: true })),
      usage: T.Optional(T.Union([ref("ChatCompletionUsage"), T.Null()])),
    },
    { additionalProperties: true, description: "One `data:` event of a stream; the last one carries usage when asked for" },
  ),
  StreamErrorEvent: T.Object(
    { error: T.Object({ message: T.String(), type: T.Literal("upstream_error") }) },
    { description: "`data:` event of a provider failure after the stream started (status stays 200), then [DONE]" },
  ),
  EmbeddingsRequest: T.Object(
    {
      model: T.String({
        minLength: 1,
        description: 'A model of kind "embedding" (GET /v1/models)',
        examples: ["openai/text-embedding-3-small"],
      }),
      input: T.Union([T.String({ minLength: 1 }), T.Array(T.String({ minLength: 1 }), { minItems: 1, maxItems: 2048 })], {
        description: "The text, or a list of texts, to embed",
      }),
      encoding_format: T.Optional(T.Union([T.Literal("float"), T.Literal("base64")], { description: "default float" })),
      dimensions: T.Optional(T.Integer({ minimum: 1, description: "Output dimensions, for models that take it" })),
      user: T.Optional(T.String()),
    },
    { description: "OpenAI-compatible; other fields are not forwarded" },
  ),
  EmbeddingsResponse: T.Object(
    {
      object: T.Literal("list"),
      data: T.Array(
        T.Object(
          {
            object: T.Literal("embedding"),
            index: Int(),
            embedding: T.Union([T.Array(T.Number()), T.String()], { description: "Floats, or base64 of little-endian float32s" }),
          },
          { additionalProperties: true },
        ),
      ),
      model: T.String({ description: "The model asked for" }),
      usage: T.Object(
        {
          prompt_tokens: Int(),
          total_tokens: Int(),
          charge_usdc: Int("µUSDC charged for the request (extension)"),
        },
        { additionalProperties: true },
      ),
    },
    { additionalProperties: true, description: "The provider's answer, naming the model asked for, with usage.charge_usdc" },
  ),
} satisfies Record<string, TSchema>;
