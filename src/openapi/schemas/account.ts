import { type TSchema, Type as T } from "@sinclair/typebox";
import { closed, DateTime, Int, Micro, ref, WalletString } from "./common.ts";

/** What a signed-in wallet manages and reads: SIWE, API keys, usage (total and daily) and the public balance. */

const SiweFields = {
  message: T.String({ description: "EIP-4361 message (at most 4 KB), signed by the wallet" }),
  signature: T.String({ pattern: "^0x[0-9a-fA-F]{130}$", description: "65-byte signature of the message, hex" }),
};

/** The account schemas, in the order the document lists them. */
export const ACCOUNT_SCHEMAS = {
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
  ApiKeyCreateRequest: T.Object({
    ...SiweFields,
    label: T.Optional(T.String({ maxLength: 100 })),
    budget_usdc: T.Optional(
      T.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER, description: "Per-key spending cap, µUSDC (extension)" }),
    ),
    models: T.Optional(
      T.Array(T.String({ minLength: 1, maxLength: 200 }), {
        minItems: 1,
        maxItems: 200,
        description:
          'Models this key may call (extension): catalog ids, or "<provider>/*" for all of a provider\'s; any other is 403 ' +
          "MODEL_NOT_ALLOWED, and GET /v1/models with the key lists only these. Absent: any model",
      }),
    ),
    requests_per_minute: T.Optional(
      T.Integer({
        minimum: 1,
        maximum: 1_000_000,
        description: "This key's own rate limit (extension), beside the wallet's: past it, 429 RATE_LIMITED with Retry-After",
      }),
    ),
    ref_code: T.Optional(T.String({ minLength: 1, maxLength: 64, description: "Referral code; not with redeem_code" })),
    redeem_code: T.Optional(
      T.String({ minLength: 1, maxLength: 64, description: "One-time code crediting the wallet; not with ref_code" }),
    ),
  }),
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
    {
      id: Int("Key id", 1),
      label: T.String(),
      created_at: DateTime,
      revoked_at: T.Union([DateTime, T.Null()], { description: "null while active" }),
      models: T.Union([T.Array(T.String()), T.Null()], { description: "The key's model allow-list (extension); null: any model" }),
      requests_per_minute: T.Union([T.Integer({ minimum: 1 }), T.Null()], {
        description: "The key's own rate limit (extension); null: only the wallet's",
      }),
    },
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
      total_cached_prompt_tokens: Int("Of total_prompt_tokens: read from the provider's cache (billed at the cached price)"),
      total_cache_write_tokens: Int("Of total_prompt_tokens: written to the provider's cache (5-minute and 1-hour writes)"),
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
  DailyUsageKey: T.Object(
    {
      api_key_id: Int("Key id", 1),
      request_count: Int(),
      total_prompt_tokens: Int(),
      total_completion_tokens: Int(),
      total_charged_usdc: Micro("Charged that day"),
    },
    { ...closed, description: "One key's spend on one day; the field names are UsageKey's" },
  ),
  DailyUsageResponse: T.Object(
    {
      wallet: WalletString,
      from: T.String({ description: "First day (UTC, YYYY-MM-DD)" }),
      to: T.String({ description: "Last day (UTC, YYYY-MM-DD): today" }),
      days: T.Array(
        T.Object(
          {
            date: T.String({ description: "UTC day, YYYY-MM-DD" }),
            total_charged_usdc: Micro("All keys that day"),
            keys: T.Array(ref("DailyUsageKey"), { description: "Keys charged that day, by id" }),
          },
          closed,
        ),
        { description: "Every day of the range, oldest first, days without charges included (keys empty)" },
      ),
    },
    closed,
  ),
  BalanceResponse: T.Object({ wallet: WalletString, available_usdc: Micro("Balance minus locked; 0 for an unknown wallet") }, closed),
} satisfies Record<string, TSchema>;
