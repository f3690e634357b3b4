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
  const headersFor = corsHeaders(origins);
  return new Elysia({ name: "cors" }).onRequest(({ request, set }) => {
    const granted = headersFor(request.headers.get("origin"));
    for (const name in granted) set.headers[name] = granted[name]!;
    // Any OPTIONS is a preflight here (no route answers OPTIONS): 204, with the grants only for an allowed origin.
    if (request.method === "OPTIONS") {
      if (granted["access-control-allow-origin"]) {
        set.headers["access-control-allow-methods"] = METHODS;
        set.headers["access-control-allow-headers"] = ALLOWED_HEADERS;
        set.headers["access-control-max-age"] = PREFLIGHT_MAX_AGE_S;
      }
      return new Response(null, { status: 204 });
    }
  });
}

/**
 * The CORS headers of an answer to a request from `origin` (the Origin header, null without): what `cors` sets on
 * every answer, and what the model doors served ahead of Elysia (app.ts) add to theirs. One frozen object per
 * outcome, built once: the caller only reads it.
 */
export function corsHeaders(origins: "*" | string[]): (origin: string | null) => Readonly<Record<string, string>> {
  const grant = (allowOrigin: string) => ({ "access-control-allow-origin": allowOrigin, "access-control-expose-headers": EXPOSED_HEADERS });
  if (origins === "*") {
    const any = Object.freeze(grant("*"));
    return () => any;
  }
  const allowed = new Map(origins.map((o) => [o, Object.freeze({ vary: "Origin", ...grant(o) })]));
  // The answer depends on the Origin: caches must key on it, whether or not this one is allowed.
  const refused = Object.freeze({ vary: "Origin" });
  return (origin) => (origin !== null && allowed.get(origin)) || refused;
}
