/** The one table of error codes: every error the API returns is one of these, with this status. */
export const ERROR_STATUS = {
  VALIDATION_ERROR: 400,
  UNKNOWN_MODEL: 400,
  UNAUTHORIZED: 401,
  INSUFFICIENT_BALANCE: 402,
  KEY_BUDGET_EXCEEDED: 402,
  // Beyond the spec's table: a model request with no credential, on a gateway that takes payments; the answer
  // carries the x402 terms of that very call (pay per call, or sign in with the wallet: docs/payments.md).
  PAYMENT_REQUIRED: 402,
  // Beyond the spec's table: a model call's x402 payment whose authorization was already spent (the same payment sent
  // again). 402 with its own code and no offer: nothing in it reads as "short of credit" or gives an x402 client
  // terms to pay again; the credit the payment bought is already the wallet's.
  PAYMENT_ALREADY_USED: 402,
  // Beyond the spec's table: the API key was created with a `models` list that does not name this model.
  MODEL_NOT_ALLOWED: 403,
  NOT_FOUND: 404,
  // Beyond the spec's table: an x402 payment-identifier id already names another payment (or one still in flight).
  CONFLICT: 409,
  // Beyond the spec's table: the wallet already has MAX_KEYS_PER_WALLET active keys; revoking one makes room.
  KEY_LIMIT_REACHED: 409,
  // Beyond the spec's table (it names no status for either): a body that did not arrive within the body deadline,
  // and one past the size limit. Both are refused before anything is read further or held.
  REQUEST_TIMEOUT: 408,
  PAYLOAD_TOO_LARGE: 413,
  RATE_LIMITED: 429,
  // The status is the one the model returned; 400 is only the fallback.
  UPSTREAM_CLIENT_ERROR: 400,
  INTERNAL_ERROR: 500,
  UPSTREAM_ERROR: 502,
  SERVICE_UNAVAILABLE: 503,
  UPSTREAM_DEADLINE: 504,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

/** Fixed messages where the spec forbids passing on detail (upstream errors) or where one wording serves all. */
export const FIXED_MESSAGE: Partial<Record<ErrorCode, string>> = {
  UNAUTHORIZED: "Missing or invalid credentials",
  UPSTREAM_CLIENT_ERROR: "The model provider rejected the request",
  UPSTREAM_ERROR: "The model provider failed to answer",
  UPSTREAM_DEADLINE: "The model provider did not answer within the deadline",
  INTERNAL_ERROR: "Internal server error",
  SERVICE_UNAVAILABLE: "The service is temporarily unavailable; try again shortly",
};

/** What an ApiError is made of: its code, and only what differs from the code's defaults. */
export interface ApiErrorFields {
  code: ErrorCode;
  /** Defaults to the code's fixed message (FIXED_MESSAGE), else the code itself. */
  message?: string;
  /** Defaults to the code's status in ERROR_STATUS (UPSTREAM_CLIENT_ERROR passes on the provider's 4xx). */
  status?: number;
  /** Fields added to the body beside error and message (a 402's available_usdc, …). */
  extra?: Record<string, unknown>;
  headers?: Record<string, string>;
  /** x402 terms beside the error (a model endpoint's 402 INSUFFICIENT_BALANCE), top level in every body shape. */
  x402?: X402Terms;
}

/** x402 v1 terms a 402 carries in its body, so an x402 v1 client can pay from the error itself. */
export interface X402Terms {
  x402Version: 1;
  accepts: unknown[];
}

/**
 * An error that knows its own HTTP answer. Thrown anywhere; app.ts renders every one the same way, by asking it
 * (`toResponse`), so no error is mapped to a status by its name anywhere else.
 */
export abstract class HttpError extends Error {
  abstract readonly status: number;
  /** `shape` is the envelope the route answers in (ERROR_SHAPE); an error with a wire format of its own ignores it. */
  abstract toResponse(shape?: ErrorShape): Response;
}

/**
 * An error that leaves the API as `{error, message, ...extra}`; thrown anywhere, rendered in one place. Built from
 * its code alone (`new ApiError("UNAUTHORIZED")`) or from named fields (`new ApiError({ code, message })`).
 */
export class ApiError extends HttpError {
  readonly code: ErrorCode;
  readonly status: number;
  readonly extra?: Record<string, unknown>;
  readonly headers?: Record<string, string>;
  readonly x402?: X402Terms;

  constructor(fields: ErrorCode | ApiErrorFields) {
    const f = typeof fields === "string" ? { code: fields } : fields;
    super(f.message ?? FIXED_MESSAGE[f.code] ?? f.code);
    this.code = f.code;
    this.status = f.status ?? ERROR_STATUS[f.code];
    this.extra = f.extra;
    this.headers = f.headers;
    this.x402 = f.x402;
  }

  /** The same error with more headers (a payment receipt, the x402 terms) and, if given, x402 terms in its body. */
  with(more: { headers?: Record<string, string>; x402?: X402Terms }): ApiError {
    const { code, message, status, extra } = this;
    return new ApiError({ code, message, status, extra, headers: { ...this.headers, ...more.headers }, x402: more.x402 ?? this.x402 });
  }

  /** 503 SERVICE_UNAVAILABLE with Retry-After: a dependency cannot serve now; nothing was done. */
  static unavailable(retryAfterS: number, message?: string): ApiError {
    return new ApiError({ code: "SERVICE_UNAVAILABLE", message, headers: { "retry-after": String(retryAfterS) } });
  }

  toResponse(shape: ErrorShape = "spec"): Response {
    return errorResponse(this, shape);
  }
}

const JSON_HEADERS = { "content-type": "application/json" };

/**
 * The envelope of an error answer: the spec's `{error: CODE, message}`, or OpenAI's `{error: {message, type, code,
 * param}}`, which OpenAI SDKs read the message and code from (ERROR_SHAPE=openai on the OpenAI-compatible routes,
 * and always on the Responses door).
 */
export type ErrorShape = "spec" | "openai";

/** OpenAI's error `type` for a status: the one mapping of every OpenAI-shaped error answer. */
export function openaiErrorType(status: number): string {
  if (status === 401) return "authentication_error";
  if (status === 402) return "insufficient_balance";
  if (status === 403) return "permission_error";
  if (status === 429) return "rate_limit_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

// The gateway's own fields beside a code. In OpenAI's shape they move inside `error`, beside the code, where SDKs
// expose them (openai-node: `err.error`). A field not listed here stays at the top level, where it was: a payment
// protocol's (x402's `x402Version`, `accepts`) is read there by its clients.
const GATEWAY_ERROR_FIELDS = new Set(["available_usdc", "required_usdc", "topup", "key_budget_left_usdc"]);

/**
 * A spec error body in OpenAI's shape: `error` becomes `{message, type, code, param, ...the gateway's fields}`, with
 * `code` the spec's code; every other top-level field stays at the top level. The one conversion, applied at render.
 */
export function toOpenaiShape(body: Record<string, unknown>, status: number, param: string | null = null): Record<string, unknown> {
  const { error: code, message, ...rest } = body;
  const inside: Record<string, unknown> = {};
  const top: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(rest)) (GATEWAY_ERROR_FIELDS.has(k) ? inside : top)[k] = v;
  return { ...top, error: { message, type: openaiErrorType(status), code: code ?? null, param, ...inside } };
}

/** Renders an error in `shape` (default: the spec's body); unknown errors become a bare INTERNAL_ERROR. */
export function errorResponse(err: ApiError, shape: ErrorShape = "spec"): Response {
  const spec = { error: err.code, message: err.message, ...err.extra, ...err.x402 };
  const body = JSON.stringify(shape === "openai" ? toOpenaiShape(spec, err.status) : spec);
  return new Response(body, {
    status: err.status,
    headers: err.headers ? { ...JSON_HEADERS, ...err.headers } : JSON_HEADERS,
  });
}

/**
 * The x402 top-up's bare answer (spec error rule 5): `{error: text}` with no code, which x402 clients expect;
 * they match on the status. Every other error is an ApiError.
 */
export class BareError extends HttpError {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }

  toResponse(): Response {
    return Response.json({ error: this.message }, { status: this.status });
  }
}

/**
 * A bad setting: start-up stops with one line that names the variable. Here, below everything, because checks on
 * every floor raise it (the environment in config.ts, a Redis the ledger cannot trust in rebuild/redisChecks.ts).
 */
export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    problem: string,
  ) {
    super(`${variable}: ${problem}`);
  }
}
