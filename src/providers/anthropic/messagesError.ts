// The gateway's statuses → Anthropic's error types (docs.claude.com/en/api/errors): the SDKs pick their error
// class by status, and show the type. A 503 (the gateway or a dependency cannot serve now) is an overload to retry.
const TYPES: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  402: "billing_error",
  403: "permission_error",
  404: "not_found_error",
  413: "request_too_large",
  429: "rate_limit_error",
  500: "api_error",
  502: "api_error",
  503: "overloaded_error",
  504: "timeout_error",
  529: "overloaded_error",
};

/** Anthropic's error type for an HTTP status: other 4xx are invalid requests, other 5xx API errors. */
export function messagesErrorType(status: number): string {
  return TYPES[status] ?? (status < 500 ? "invalid_request_error" : "api_error");
}

/** Anthropic's error body: `{type: "error", error: {type, message}}`. */
export function messagesErrorBody(status: number, message: string): string {
  return JSON.stringify({ type: "error", error: { type: messagesErrorType(status), message } });
}
