import { ApiError } from "../errors.ts";
import type { ReserveRefusal } from "../ledger/ledger.ts";

/** Where a client short of credit tops up: the 402's hint (spec). */
export const TOPUP_HINT = { endpoint: "/v1/topup", method: "POST", minimum_usd: 1 };

/** How credit comes on a gateway without payment settings, whose /v1/topup answers 503: the 402's hint there. */
export const NO_TOPUP_HINT = {
  endpoint: null,
  message: "This gateway takes no payments: its operator grants credit (admin grant) or hands out redeem codes (POST /v1/auth/keys)",
};

/** The 402 INSUFFICIENT_BALANCE of a gateway that takes no payments: the same refusal, pointing at the operator. */
export function withoutTopup(e: ApiError): ApiError {
  return new ApiError({
    code: e.code,
    message: `${e.message}; this gateway takes no payments: ask its operator for credit`,
    extra: { ...e.extra, topup: NO_TOPUP_HINT },
    headers: e.headers,
  });
}

/** The spec's 401/402/429 for a reserve the ledger refused, with its body fields and rate-limit headers. */
export function refusalError(r: ReserveRefusal): ApiError {
  switch (r.refusal) {
    case "RATE_LIMITED": {
      const retryS = Math.max(1, Math.ceil(r.retryAfterMs / 1000));
      return new ApiError({
        code: "RATE_LIMITED",
        message:
          r.scope === "key"
            ? `This API key's rate limit of ${r.limit} requests per minute exceeded`
            : `Rate limit of ${r.limit} requests per ${r.windowMs / 1000} s exceeded`,
        headers: {
          "retry-after": String(retryS),
          "x-ratelimit-limit": String(r.limit),
          "x-ratelimit-remaining": "0",
          "x-ratelimit-reset": String(retryS),
        },
      });
    }
    case "KEY_BUDGET_EXCEEDED":
      return new ApiError({
        code: "KEY_BUDGET_EXCEEDED",
        message: "This API key's budget cannot cover the request",
        extra: { key_budget_left_usdc: r.budgetLeft, required_usdc: r.required },
      });
    case "INSUFFICIENT_BALANCE":
      return new ApiError({
        code: "INSUFFICIENT_BALANCE",
        message: "Balance cannot cover the estimated cost of this request",
        extra: { available_usdc: r.available, required_usdc: r.required, topup: TOPUP_HINT },
      });
    case "UNAUTHORIZED":
      return new ApiError("UNAUTHORIZED");
  }
}
