import { ApiError } from "../errors.ts";

/**
 * The spec's error for an upstream HTTP status: a 4xx is the model rejecting the request (its status kept, so a
 * provider's 429 stays 429), anything else is the model failing (502). Messages are the fixed ones: upstream
 * detail never reaches the client.
 */
export function upstreamStatusError(status: number): ApiError {
  if (status >= 400 && status < 500) return new ApiError({ code: "UPSTREAM_CLIENT_ERROR", status });
  return new ApiError("UPSTREAM_ERROR");
}
