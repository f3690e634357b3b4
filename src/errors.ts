/** The one table of error codes: every error the API returns is one of these, with this status. */
export const ERROR_STATUS = {
  VALIDATION_ERROR: 400,
  UNKNOWN_MODEL: 400,
  UNAUTHORIZED: 401,
  INSUFFICIENT_BALANCE: 402,
  KEY_BUDGET_EXCEEDED: 402,
  NOT_FOUND: 404,
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

/** An error that leaves the API as `{error, message, ...extra}`; thrown anywhere, rendered in one place. */
export class ApiError extends Error {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    message?: string,
    readonly extra?: Record<string, unknown>,
    status?: number,
    readonly headers?: Record<string, string>,
  ) {
    super(message ?? FIXED_MESSAGE[code] ?? code);
    this.status = status ?? ERROR_STATUS[code];
  }
}

const JSON_HEADERS = { "content-type": "application/json" };

/** Renders any error as the spec's error body; unknown errors become a bare INTERNAL_ERROR. */
export function errorResponse(err: ApiError): Response {
  const body = JSON.stringify({ error: err.code, message: err.message, ...err.extra });
  return new Response(body, {
    status: err.status,
    headers: err.headers ? { ...JSON_HEADERS, ...err.headers } : JSON_HEADERS,
  });
}

/** Top-up exception of the spec (rule 5): `{error: text}` with no code, clients match on the status. */
export class PlainError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}
