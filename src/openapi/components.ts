import { type TSchema, Type as T } from "@sinclair/typebox";
import { ERROR_STATUS } from "../errors.ts";

/**
 * The named schemas of the API (OpenAPI `components.schemas`), as plain JSON Schema (TypeBox's `Type`, not Elysia's
 * `t`, whose Integer accepts numeric strings and documents itself as `string | integer`). Request bodies here are
 * also what Elysia validates (routes name them: `body: "ChatCompletionRequest"`), so they hold no `$ref`; answers
 * may point at one another with `ref`. No `default` in a request body: Elysia would write it into the body the
 * provider gets.
 */
const ref = (name: string) => T.Unsafe({ $ref: `#/components/schemas/${name}` });
const Int = (description?: string, min = 0) => T.Integer({ minimum: min, ...(description ? { description } : {}) });
const Micro = (description: string) => T.Integer({ description: `${description}, µUSDC (1 USD = 1,000,000)` });
const DateTime = T.String({ format: "date-time" });
const WalletString = T.String({ pattern: "^0x[a-fA-F0-9]{40}$", description: "Ethereum address (answers give it lower-case)" });
const closed = { additionalProperties: false };
// A string enum as generators read it (`enum`), rather than TypeBox's anyOf of consts.
const Enum = (values: string[], description?: string) => T.Unsafe<string>({ type: "string", enum: values, ...(description ? { description } : {}) });

const ErrorCode = Enum(Object.keys(ERROR_STATUS), "Machine-readable code (see the error table)");

const ChatMessage = T.Object(
  {
    role: T.Union([T.Literal("system"), T.Literal("user"), T.Literal("assistant"), T.Literal("tool"), T.Literal("developer")]),
    // A string per the spec; content parts and null (assistant tool calls) are what OpenAI clients also send.
    content: T.Union([T.String(), T.Array(T.Any()), T.Null()]),
  },
  { additionalProperties: true },
);

const ChatCompletionRequest = T.Object(
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

// Request bodies stay open to unknown fields, as they always were.
const TopupRequest = T.Object({ amount: T.Number({ description: "USD to credit: at least 1, at most 6 decimals", examples: [5] }) });

const SiweFields = {
  message: T.String({ description: "EIP-4361 message (at most 4 KB), signed by the wallet" }),
  signature: T.String({ pattern: "^0x[0-9a-fA-F]{130}$", description: "65-byte signature of the message, hex" }),
};

/** Every named schema; the OpenAPI document lists them under components.schemas. */
export const COMPONENTS = {
  Error: T.Object(
    { error: ErrorCode, message: T.String({ description: "Human-readable" }) },
    { description: "The error body of every endpoint but the top-up's plain errors" },
  ),
  InsufficientBalanceError: T.Intersect([
    ref("Error"),
    T.Object({
      available_usdc: Micro("Available credit now"),
      required_usdc: Micro("What the request reserves"),
      topup: T.Object(
        { endpoint: T.String(), method: T.String(), minimum_usd: T.Number() },
        { ...closed, description: "How to add credit" },
      ),
    }),
  ], { description: "402 INSUFFICIENT_BALANCE" }),
  KeyBudgetError: T.Intersect([
    ref("Error"),
    T.Object({ key_budget_left_usdc: Micro("What the key's budget has left"), required_usdc: Micro("What the request reserves") }),
  ], { description: "402 KEY_BUDGET_EXCEEDED" }),
  PlainError: T.Object({ error: T.String({ description: "Human-readable; match on the HTTP status" }) }, {
    ...closed,
    description: "Top-up errors without a code: bad payment encoding, mismatched payment, facilitator unreachable",
  }),
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
    },
    closed,
  ),
  ModelList: T.Object({ object: T.Literal("list"), data: T.Array(ref("Model")) }, closed),
  ChatMessage,
  ChatCompletionRequest,
  ChatCompletionUsage: T.Object(
    { prompt_tokens: Int(), completion_tokens: Int(), total_tokens: Int() },
    { additionalProperties: true, description: "The usage the answer is billed at" },
  ),
  ChatCompletionResponse: T.Object(
    {
      id: T.String(),
      object: T.String({ examples: ["chat.completion"] }),
      created: T.Optional(T.Integer()),
      model: T.String(),
      choices: T.Array(
        T.Object({ index: Int(), message: ref("ChatMessage"), finish_reason: T.Union([T.String(), T.Null()]) }, { additionalProperties: true }),
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
  TopupRequest,
  PaymentRequirement: T.Object(
    {
      scheme: T.String({ examples: ["exact"] }),
      network: T.String({ description: "Chain identifier (x402 v1 name)" }),
      amount: T.String({ pattern: "^[0-9]+$", description: "Integer amount in the asset's smallest unit" }),
      maxAmountRequired: T.String({ pattern: "^[0-9]+$", description: "Same as amount (x402 v1 name)" }),
      asset: T.String({ description: "Token contract address" }),
      payTo: T.String({ description: "Recipient address" }),
      resource: T.Optional(T.String()),
      description: T.Optional(T.String()),
      mimeType: T.Optional(T.String()),
      maxTimeoutSeconds: T.Optional(Int()),
      extra: T.Record(T.String(), T.Unknown(), { description: "EIP-712 name and version; permit assets: assetTransferMethod, spender" }),
    },
    { additionalProperties: true },
  ),
  PaymentRequirements: T.Object(
    {
      x402Version: T.Integer({ examples: [1] }),
      error: T.Optional(T.String({ description: "Why a presented payment was refused" })),
      accepts: T.Array(ref("PaymentRequirement")),
    },
    { additionalProperties: true, description: "402 body of a top-up: x402 v1 (the v2 terms are in PAYMENT-REQUIRED)" },
  ),
  TopupResponse: T.Object({ balance_usdc: Micro("New balance"), credited_usdc: Micro("Amount credited (0 for a payment credited before)") }, closed),
  TopupRecord: T.Object(
    { id: Int(), amount_usdc: Micro("Amount"), tx_hash: T.String({ description: "Settlement transaction" }), created_at: DateTime },
    closed,
  ),
  TopupsResponse: T.Object(
    { wallet: WalletString, network: T.String({ description: "Settlement network name" }), topups: T.Array(ref("TopupRecord")) },
    closed,
  ),
  SiweAuth: T.Object(SiweFields),
  SiweParameters: T.Object(
    {
      domain: T.String({ description: "The message's domain (host[:port])" }),
      uri: T.String({ description: "A URI on that domain for the message's URI field" }),
      version: T.Literal("1"),
      chain_ids: T.Array(T.Integer(), { description: "Accepted Chain IDs" }),
      nonce: T.String({ description: "A fresh nonce (any nonce of ≥ 8 letters or digits is accepted; replay is refused by message)" }),
      statement: T.Union([T.String(), T.Null()], { description: "Required statement, or null: any statement (or none) is accepted" }),
      issued_at_max_age_s: T.Integer({ description: "A message is accepted at most this many seconds after its Issued At" }),
      clock_skew_s: T.Integer({ description: "How far Issued At and Not Before may lie in the future" }),
      expiration_max_s: T.Union([T.Integer(), T.Null()], {
        description: "Upper bound on Expiration Time − Issued At, or null: Expiration Time is optional and unbounded",
      }),
    },
    { ...closed, description: "What GET /v1/auth/siwe answers: everything needed to build an acceptable SIWE message" },
  ),
  ApiKeyCreateRequest: T.Object(
    {
      ...SiweFields,
      label: T.Optional(T.String({ maxLength: 100 })),
      budget_usdc: T.Optional(T.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER, description: "Per-key spending cap, µUSDC (extension)" })),
      ref_code: T.Optional(T.String({ minLength: 1, maxLength: 64, description: "Referral code; not with redeem_code" })),
      redeem_code: T.Optional(T.String({ minLength: 1, maxLength: 64, description: "One-time code crediting the wallet; not with ref_code" })),
    },
  ),
  ApiKeyCreateResponse: T.Object(
    {
      id: Int("Key id", 1),
      key: T.String({ pattern: "^sk-[0-9a-f]{64}$", description: "The plaintext key, shown this once" }),
      label: T.String(),
      created_at: DateTime,
      redeemed_credit_usdc: T.Optional(Micro("Credit of the redeem_code, when one was given")),
    },
    closed,
  ),
  ApiKeySummary: T.Object(
    { id: Int("Key id", 1), label: T.String(), created_at: DateTime, revoked_at: T.Union([DateTime, T.Null()], { description: "null while active" }) },
    closed,
  ),
  ApiKeyList: T.Object({ data: T.Array(ref("ApiKeySummary")) }, closed),
  ApiKeyRevokeResponse: T.Object({ revoked: T.Boolean() }, closed),
  UsageKey: T.Object(
    {
      api_key_id: Int("Key id", 1),
      label: T.String(),
      request_count: Int(),
      total_prompt_tokens: Int(),
      total_completion_tokens: Int(),
      total_charged_usdc: Micro("Charged"),
      total_platform_revenue_usd: T.Number({ description: "USD" }),
    },
    closed,
  ),
  UsageResponse: T.Object(
    {
      wallet: WalletString,
      balance_usdc: Micro("Balance"),
      locked_usdc: Micro("Held for requests in flight"),
      available_usdc: Micro("balance_usdc − locked_usdc"),
      keys: T.Array(ref("UsageKey")),
    },
    closed,
  ),
  BalanceResponse: T.Object({ wallet: WalletString, available_usdc: Micro("Balance minus locked; 0 for an unknown wallet") }, closed),
} satisfies Record<string, TSchema>;

export type ComponentName = keyof typeof COMPONENTS;

/** The request bodies among them: self-contained, so Elysia can validate with them by name. */
export const REQUEST_BODIES = { ChatCompletionRequest, TopupRequest };
