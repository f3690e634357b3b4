import { ApiError } from "../../errors.ts";
import { upstreamStatusError } from "../errors.ts";
import type { ErrorBody } from "./wire.ts";

/**
 * Anthropic's error body (`{type: "error", error: {type, message}}`) to the spec's error. The type decides where
 * it is clearer than the status (an overload is 529, and some proxies send it as 500 or 503); otherwise the
 * status does. The message is never passed on.
 */
export function anthropicError(status: number, body: string): ApiError {
  let type: unknown;
  try {
    type = (JSON.parse(body) as ErrorBody | null)?.error?.type;
  } catch {
    // not JSON (a proxy's HTML page): the status decides
  }
  switch (type) {
    case "overloaded_error":
    case "api_error":
      return new ApiError("UPSTREAM_ERROR");
    case "timeout_error":
      return new ApiError("UPSTREAM_DEADLINE");
    case "rate_limit_error":
      return new ApiError({ code: "UPSTREAM_CLIENT_ERROR", status: 429 });
    case "invalid_request_error":
      return new ApiError({ code: "UPSTREAM_CLIENT_ERROR", status: status >= 400 && status < 500 ? status : 400 });
    default:
      return upstreamStatusError(status);
  }
}
