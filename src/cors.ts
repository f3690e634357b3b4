import { Elysia } from "elysia";

const METHODS = "GET, POST, DELETE, OPTIONS";
/**
 * What browsers may send: the bearer key, JSON bodies, x402 v1 and v2 payment headers, a SIWx sign-in, a caller's
 * request id, the `Access-Control-Expose-Headers` request header x402's fetch wrappers add to every paid retry, and
 * Anthropic's SDK headers (its key in `x-api-key`). The trailing `*` lets through whatever else an SDK adds (the
 * OpenAI SDK's `x-stainless-*` headers): it is honoured because CORS here is never credentialed, and it does not
 * cover `Authorization`, which is why that one is named.
 */
const ALLOWED_HEADERS = [
  "Authorization",
  "Content-Type",
  "X-Payment",
  "PAYMENT-SIGNATURE",
  "SIGN-IN-WITH-X",
  "X-Request-Id",
  "Access-Control-Expose-Headers",
  "x-api-key",
  "anthropic-version",
  "anthropic-beta",
  "anthropic-dangerous-direct-browser-access",
  "*",
].join(", ");
/** What browser code may read: payment terms and receipts, rate-limit state, the request id, the tools left out. */
const EXPOSED_HEADERS = [
  "PAYMENT-REQUIRED",
  "PAYMENT-RESPONSE",
  "X-PAYMENT-RESPONSE",
  "X-RateLimit-Limit",
  "X-RateLimit-Remaining",
  "X-RateLimit-Reset",
  "Retry-After",
  "X-Request-Id",
  "X-Served-Model",
  "X-Tools-Left-Out",
].join(", ");
const PREFLIGHT_MAX_AGE_S = "600";

/**
 * CORS for browser clients (a dApp signing in, a dashboard). `"*"` suits a public API: credentials are a bearer
 * key or a SIWE signature the page itself sends, never cookies, so another origin gains nothing it could not do
 * from a script; credentialed CORS is never enabled. A list allows exactly those origins.
 *
 * A small hook rather than @elysiajs/cors: that plugin answers `Vary: *` on every response under "*" (defeating
 * HTTP caches of public GETs) and echoes request headers as exposed ones unless told otherwise.
 */
export function cors(origins: "*" | string[]) {
  const allowed = origins === "*" ? null : new Set(origins);
  return new Elysia({ name: "cors" }).onRequest(({ request, set }) => {
    const origin = request.headers.get("origin");
    let allowOrigin: string | undefined;
    if (!allowed) allowOrigin = "*";
    else {
      set.headers.vary = "Origin"; // the answer depends on the Origin: caches must key on it
      if (origin !== null && allowed.has(origin)) allowOrigin = origin;
    }
    if (allowOrigin) {
      set.headers["access-control-allow-origin"] = allowOrigin;
      set.headers["access-control-expose-headers"] = EXPOSED_HEADERS;
    }
    // Any OPTIONS is a preflight here (no route answers OPTIONS): 204, with the grants only for an allowed origin.
    if (request.method === "OPTIONS") {
      if (allowOrigin) {
        set.headers["access-control-allow-methods"] = METHODS;
        set.headers["access-control-allow-headers"] = ALLOWED_HEADERS;
        set.headers["access-control-max-age"] = PREFLIGHT_MAX_AGE_S;
      }
      return new Response(null, { status: 204 });
    }
  });
}
