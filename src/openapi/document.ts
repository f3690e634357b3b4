import { ERROR_STATUS, type ErrorCode, FIXED_MESSAGE } from "../errors.ts";
import type { ComponentName } from "./components.ts";

/**
 * Building blocks for the `detail` of each route, so every operation is documented the same way: answers point at
 * named schemas, errors at the one Error schema with an example per code, headers and security at named
 * components. A route documents itself with `detail: doc({ summary, security, responses: {...} })`.
 */

type Json = Record<string, unknown>;

/** A wallet for examples. */
export const EXAMPLE_WALLET = "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed";

/** Response headers the API sends, declared once (components.headers). */
export const HEADERS = {
  "X-Request-Id": {
    description: "Id of this request, also in the access log; a client's own X-Request-Id is echoed when it is a plain token",
    required: true,
    schema: { type: "string" },
  },
  "X-RateLimit-Limit": { description: "Requests allowed per window for the wallet", schema: { type: "integer" } },
  "X-RateLimit-Remaining": { description: "Requests left in the current window for the wallet", schema: { type: "integer" } },
  "X-RateLimit-Reset": { description: "Seconds until a request is allowed again", schema: { type: "integer" } },
  "X-Served-Model": {
    description:
      "The catalog model that served the answer: the one asked for, or one of its catalog `fallbacks` when its provider " +
      "failed before answering (the answer still names the model asked for; the charge is at the serving model's prices)",
    schema: { type: "string" },
  },
  "Retry-After": { description: "Seconds to wait before retrying", schema: { type: "integer" } },
  "PAYMENT-REQUIRED": {
    description:
      "x402 v2: the body's payment terms, base64 JSON (CAIP-2 network), and USDT through x402's Permit2 flow too " +
      '(extra.assetTransferMethod "permit2", ahead of the permit entry; extensions.eip2612GasSponsoring declared)',
    schema: { type: "string" },
  },
  "X-PAYMENT-RESPONSE": {
    description: "x402 v1 settlement receipt, base64 JSON {success, transaction, network, payer}",
    schema: { type: "string" },
  },
  "PAYMENT-RESPONSE": { description: "x402 v2 settlement receipt (same content as X-PAYMENT-RESPONSE)", schema: { type: "string" } },
  "Cache-Control": { description: "no-store on answers carrying a secret or a payment", schema: { type: "string" } },
} as const;
export type HeaderName = keyof typeof HEADERS;

/** How clients authenticate (components.securitySchemes); SIWE in a body is a pair of required body fields instead. */
export const SECURITY_SCHEMES = {
  apiKey: { type: "http", scheme: "bearer", bearerFormat: "sk-<64 hex>", description: "API key from POST /v1/auth/keys" },
  apiKeyQuery: { type: "apiKey", in: "query", name: "api_key", description: "API key as a query parameter (top-up history only)" },
  siweMessage: { type: "apiKey", in: "query", name: "message", description: "SIWE (EIP-4361) message; goes with siweSignature" },
  siweSignature: { type: "apiKey", in: "query", name: "signature", description: "Wallet signature of the SIWE message, hex" },
  x402Payment: {
    type: "apiKey",
    in: "header",
    name: "X-Payment",
    description: "x402 v1 payment payload, base64 (top-up step 2, or a model request paying the terms of its 402)",
  },
  x402PaymentV2: {
    type: "apiKey",
    in: "header",
    name: "PAYMENT-SIGNATURE",
    description: "x402 v2 payment payload, base64 (top-up step 2, or a model request paying the terms of its 402)",
  },
} as const;

/** Security requirements as operations list them. */
export const SECURITY = {
  apiKey: { apiKey: [] },
  apiKeyQuery: { apiKeyQuery: [] },
  siweQuery: { siweMessage: [], siweSignature: [] },
  x402: { x402Payment: [] },
  x402V2: { x402PaymentV2: [] },
  /** A model request: the API key, and optionally an x402 payment (v2 or v1) for the terms of its 402. */
  paidCall: [{ apiKey: [] }, { apiKey: [], x402PaymentV2: [] }, { apiKey: [], x402Payment: [] }],
  /** Listed beside others: the operation also works without credentials (top-up step 1). */
  none: {},
} as const;

const schemaRef = (name: ComponentName) => ({ $ref: `#/components/schemas/${name}` });
const headerRefs = (names: readonly HeaderName[]) =>
  Object.fromEntries(["X-Request-Id", ...names].map((h) => [h, { $ref: `#/components/headers/${h}` }]));

/** A JSON answer of a named schema. */
export function json(schema: ComponentName, description: string, example?: unknown, headers: readonly HeaderName[] = []): Json {
  return {
    description,
    headers: headerRefs(headers),
    content: { "application/json": { schema: schemaRef(schema), ...(example === undefined ? {} : { example }) } },
  };
}

/** A non-JSON answer (Prometheus text, HTML). */
export function text(description: string, mediaType: string, example: string): Json {
  return { description, headers: headerRefs([]), content: { [mediaType]: { schema: { type: "string" }, example } } };
}

/** The spec's error answers for these codes, grouped by status, one example per code. */
export function errors(...codes: ErrorCode[]): Record<number, Json> {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const c of codes) byStatus.set(ERROR_STATUS[c], [...(byStatus.get(ERROR_STATUS[c]) ?? []), c]);
  const out: Record<number, Json> = {};
  // The model's own rate limit comes back as 429 UPSTREAM_CLIENT_ERROR (spec, errors rule 1).
  if (codes.includes("UPSTREAM_CLIENT_ERROR") && byStatus.has(429)) byStatus.get(429)!.push("UPSTREAM_CLIENT_ERROR");
  for (const [status, group] of byStatus) {
    const examples = Object.fromEntries(
      group.map((c) => [c, { value: { error: c, message: FIXED_MESSAGE[c] ?? EXAMPLE_MESSAGE[c] ?? c } }]),
    );
    out[status] = {
      description: group.join(" or "),
      // Sent with RATE_LIMITED (not with the provider's own 429).
      headers: headerRefs(status === 429 ? ["Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"] : []),
      content: { "application/json": { schema: schemaRef("Error"), examples } },
    };
  }
  return out;
}

const EXAMPLE_MESSAGE: Partial<Record<ErrorCode, string>> = {
  VALIDATION_ERROR: "messages: Expected array",
  UNKNOWN_MODEL: 'Unknown model "nope/nothing"',
  INSUFFICIENT_BALANCE: "Balance cannot cover the estimated cost of this request",
  KEY_BUDGET_EXCEEDED: "This API key's budget cannot cover the request",
  NOT_FOUND: "No such API key for this wallet",
  MODEL_NOT_ALLOWED: 'This API key may not call model "openai/gpt-4o"',
  REQUEST_TIMEOUT: "Request body not received within 60000 ms",
  PAYLOAD_TOO_LARGE: "Request body too large (at most 33554432 bytes)",
  RATE_LIMITED: "Rate limit of 600 requests per 60 s exceeded",
  SERVICE_UNAVAILABLE: "Service unavailable",
};

/** Merges response maps (later wins), for `responses: merge(json(...), errors(...))`-style composition. */
export function responses(...parts: Record<number, Json>[]): Record<number, Json> {
  return Object.assign({}, ...parts);
}

/** Where doc() keeps a route's own parameters and body: the generator replaces both, docs.ts puts these back. */
export const OWN_PARAMETERS = "x-own-parameters";
export const OWN_REQUEST_BODY = "x-own-request-body";
export const OWN_PATH = "x-own-path";

/**
 * The `detail` of a route: an OpenAPI operation (public unless it names its security). `parameters` and
 * `requestBody` given here win over the ones generated from the route's schemas (parameters by name and place): a
 * path id checked as digits but documented as an integer, SIWE fields documented as required that the route lets
 * through to the verifier (the spec's 401, not a 400).
 */
export function doc(op: {
  summary: string;
  /** The path as the document shows it, for a route whose pattern has no OpenAPI form (a `*` wildcard). */
  path?: string;
  description?: string;
  security?: readonly Json[];
  parameters?: readonly Json[];
  requestBody?: Json;
  responses: Record<number, Json>;
}): { summary: string } & Json {
  const { parameters, requestBody, path, ...rest } = op;
  return {
    ...rest,
    ...(parameters ? { [OWN_PARAMETERS]: parameters } : {}),
    ...(requestBody ? { [OWN_REQUEST_BODY]: requestBody } : {}),
    ...(path ? { [OWN_PATH]: path } : {}),
  };
}

/** A documented path parameter. */
export function pathParam(name: string, description: string, schema: Json): Json {
  return { name, in: "path", required: true, description, schema };
}

/** A request body of a named schema. */
export function body(schema: ComponentName, example: unknown): Json {
  return { required: true, content: { "application/json": { schema: schemaRef(schema), example } } };
}

/** A documented query parameter (for routes without an Elysia query schema). */
export function queryParam(name: string, description: string, required: boolean): Json {
  return { name, in: "query", required, description, schema: { type: "string" } };
}
