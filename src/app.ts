import { Elysia, ValidationError } from "elysia";
import { cors, corsHeaders } from "./cors.ts";
import { dashboardRoutes } from "./dashboard/dashboard.routes.ts";
import { ApiError, errorResponse, type ErrorShape, HttpError } from "./errors.ts";
import { log } from "./log.ts";
import { outageOf } from "./outage.ts";
import { balanceRoutes } from "./modules/balance/balance.routes.ts";
import { chatRoutes, serveChat } from "./modules/chat/chat.routes.ts";
import { embeddingsRoutes, serveEmbeddings } from "./modules/embeddings/embeddings.routes.ts";
import { healthRoutes } from "./modules/health/health.routes.ts";
import { keysRoutes } from "./modules/keys/keys.routes.ts";
import { siweRoutes } from "./modules/keys/siwe.routes.ts";
import { inAnthropicShape, messagesRoutes, serveMessages } from "./modules/messages/messages.routes.ts";
import { metricsRoutes } from "./modules/metrics/metrics.routes.ts";
import { modelsRoutes } from "./modules/models/models.routes.ts";
import { responsesError, responsesRoutes, serveResponses } from "./modules/responses/responses.routes.ts";
import { topupHistoryRoutes } from "./modules/topup/history.routes.ts";
import { topupPayRoutes } from "./modules/topup/pay.routes.ts";
import { wellKnownRoutes } from "./modules/paycall/wellknown.routes.ts";
import { dailyUsageRoutes } from "./modules/usage/daily.routes.ts";
import { usageRoutes } from "./modules/usage/usage.routes.ts";
import { finishTrace, startTrace, traceOf } from "./observe/trace.ts";
import { openapiDocs } from "./openapi/docs.ts";
import { bodyTooLarge, declaredTooLarge, jsonBody, readBody, unboundedBody } from "./requestBody.ts";
import { TypeCompiler } from "@sinclair/typebox/compiler";
import { ChatCompletionRequest } from "./openapi/schemas/chat.ts";
import type { Services } from "./wiring.ts";

function validationMessage(error: ValidationError): string {
  try {
    const first = error.all[0] as { path?: string; summary?: string; message?: string } | undefined;
    // The path names the field; where it is empty, the part of the request (body, query, params) does.
    if (first) return `${first.path || error.type}: ${first.summary ?? first.message ?? "invalid"}`.slice(0, 300);
  } catch {
    // fall through to the generic text
  }
  return "Invalid request parameters";
}

// The OpenAI-compatible routes (the spec's chat completions and model list, and GET /v1/models/{id}): with
// ERROR_SHAPE=openai their errors take OpenAI's envelope, so OpenAI SDKs show the gateway's message and code.
const OPENAI_ROUTES = /^\/v1\/(chat\/completions|models)(\/|$)/;

/** The envelope of `request`'s error answers: OpenAI's on the OpenAI-compatible routes with ERROR_SHAPE=openai. */
function shapeFor(request: Request, s: Services): ErrorShape {
  if (s.config.errorShape === "spec") return "spec";
  return OPENAI_ROUTES.test(new URL(request.url).pathname) ? s.config.errorShape : "spec";
}

/** The error answer (in `shape`) for anything thrown while serving (a request started at `startedAt`); detail goes to the log only. */
function renderError(code: string | number, error: unknown, s: Services, startedAt: number, shape: ErrorShape): Response {
  if (error instanceof HttpError) return error.toResponse(shape);
  if (code === "VALIDATION") {
    // A response that fails its own schema is our bug, not the client's: 500, with the detail in the log only.
    if ((error as ValidationError).type === "response") {
      log.error("response failed its schema", { error: validationMessage(error as ValidationError) });
      return errorResponse(new ApiError("INTERNAL_ERROR"), shape);
    }
    return errorResponse(new ApiError({ code: "VALIDATION_ERROR", message: validationMessage(error as ValidationError) }), shape);
  }
  // The body reader's 408 / 413 reach here wrapped in Elysia's ParseError.
  if (code === "PARSE" && (error as Error).cause instanceof HttpError) return ((error as Error).cause as HttpError).toResponse(shape);
  if (code === "PARSE") return errorResponse(new ApiError({ code: "VALIDATION_ERROR", message: "Body is not valid JSON" }), shape);
  if (code === "NOT_FOUND") return errorResponse(new ApiError({ code: "NOT_FOUND", message: "No such route" }), shape);
  // Redis or Postgres unreachable: the client may retry, nothing was done (see docs/design.md, What each failure answers).
  const down = outageOf(error);
  if (down) {
    // One log line per Postgres outage (PgHealth), per Redis outage (the ioredis listener), not one per request.
    if (down === "postgres") s.pgHealth.markDown(error, startedAt);
    return errorResponse(ApiError.unavailable(1), shape);
  }
  log.error("unhandled error", { code, error });
  return errorResponse(new ApiError("INTERNAL_ERROR"), shape);
}

// Elysia reads a request's path from a fixed offset of its URL (the first "/" from the 12th character: "https://" and a
// host of 3+ characters, "http://" and 4+), so "Host: x" routed GET /v1/metrics as /metrics, past the proxy rules an
// operator writes; a request with no Host (HTTP/1.0) has a relative URL. Such a request is served under this origin
// instead, its path read properly (nothing in the gateway answers by host: payment URLs come from PUBLIC_URL).
const CANONICAL_ORIGIN = "http://gateway.invalid";

/**
 * The request as the router must see it, before any routing: a Host header sent twice (a comma-joined list here) is
 * 400 (RFC 9112 §3.2); a URL whose path Elysia would misread is rebuilt under CANONICAL_ORIGIN. Every other request
 * passes as it is, after two string searches; `pathAt` is then where its path starts in its URL.
 */
function routable(request: Request, url: string, pathAt: { start: number }): Request | Response {
  const host = request.headers.get("host");
  if (host !== null && host.includes(",")) {
    const error = new ApiError({ code: "VALIDATION_ERROR", message: "Host header sent more than once", headers: { connection: "close" } });
    return errorResponse(error, "spec");
  }
  const authority = url.startsWith("https://") ? 8 : url.startsWith("http://") ? 7 : -1;
  const start = authority === -1 ? -1 : url.indexOf("/", authority);
  if (start !== -1 && start === url.indexOf("/", 11)) {
    pathAt.start = start;
    return request;
  }
  const path = start !== -1 ? url.slice(start) : url.startsWith("/") ? url : "/";
  return new Request(CANONICAL_ORIGIN + path, request);
}

/**
 * A model endpoint served ahead of Elysia (issue 31): a POST to its exact path, with a declared body within
 * MAX_BODY_BYTES, read once and parsed once, checked by its schema compiled once. Only the answer that request
 * needs is computed here: no lifecycle of hooks, no header merging, no schema walk. Any other request to the path
 * (no Content-Length, a body too large, not JSON, failing the schema, a query string) takes the Elysia route,
 * whose answers (and errors, in the door's own shape) these mirror.
 */
interface LeanDoor {
  /** The route pattern (metrics, access log). */
  route: string;
  /** The Elysia route's body schema, compiled; a body it refuses is answered by Elysia (its error text). */
  check?: (body: unknown) => boolean;
  serve(body: unknown, request: Request): Promise<Response>;
  /** What the route's error handling answers for `error` thrown while serving `request`. */
  fail(error: unknown, request: Request): Response | Promise<Response>;
}

/** Elysia's error code for a thrown error (its onError's `code`). */
// Where the path of the request being routed starts in its URL (routable writes it; read at once, one thread).
const pathAt = { start: -1 };

const elysiaCode = (error: unknown): string => ((error as { code?: unknown } | null)?.code as string | undefined) ?? "UNKNOWN";

function leanDoors(s: Services): Map<string, LeanDoor> {
  const chatBody = TypeCompiler.Compile(ChatCompletionRequest);
  const appError = (error: unknown, request: Request): Response => {
    const res = renderError(elysiaCode(error), s.paidCalls.offerOn(error, request), s, traceOf(request).start, shapeFor(request, s));
    traceOf(request).status = res.status;
    return res;
  };
  const responsesFail = responsesError(s);
  const messages = serveMessages(s);
  // The Messages door's answers in Anthropic's error shape, as its Elysia route's mapper writes them.
  const anthropic = async (res: Response): Promise<Response> => (await inAnthropicShape(res)) ?? res;
  return new Map<string, LeanDoor>([
    ["/v1/chat/completions", { route: "/v1/chat/completions", check: (b) => chatBody.Check(b), serve: serveChat(s), fail: appError }],
    ["/v1/embeddings", { route: "/v1/embeddings", serve: serveEmbeddings(s), fail: appError }],
    [
      "/v1/responses",
      { route: "/v1/responses", serve: serveResponses(s), fail: (error, request) => responsesFail(elysiaCode(error), error, request) },
    ],
    [
      "/v1/messages",
      {
        route: "/v1/messages",
        serve: async (body, request) => anthropic(await messages(body, request)),
        fail: (error, request) => anthropic(appError(error, request)),
      },
    ],
  ]);
}

/**
 * Serves `request` at a lean door (its path and method matched), or hands it to Elysia (`handle`) when the door
 * leaves it to the route: the same hooks then see it as they would have.
 */
async function serveLean(
  door: LeanDoor,
  request: Request,
  handle: (r: Request) => unknown,
  s: Services,
  cors: (origin: string | null) => Readonly<Record<string, string>>,
): Promise<Response> {
  const arrived = performance.now();
  const length = request.headers.get("content-length");
  if (length === null || !(Number(length) <= s.config.maxBodyBytes)) return handle(request) as Promise<Response>;
  let text: string;
  try {
    text = await readBody(request, s.config);
  } catch (e) {
    // The body deadline (408): the door's error, as Elysia's parse hook would have had it answered.
    startTrace(request).start = arrived;
    return finishLean(door, request, cors, await door.fail(e, request));
  }
  let body: unknown;
  try {
    body = text === "" ? undefined : JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (body === undefined || (door.check && !door.check(body))) {
    // Refused: Elysia answers it (its parse and validation errors), from the body read here.
    return handle(new Request(request.url, { method: request.method, headers: request.headers, body: text })) as Promise<Response>;
  }
  startTrace(request).start = arrived;
  let res: Response;
  try {
    res = await door.serve(body, request);
  } catch (e) {
    res = await door.fail(e, request);
  }
  return finishLean(door, request, cors, res);
}

/** The answer of a lean door with what every answer carries (request id, CORS), counted and logged. */
function finishLean(
  door: LeanDoor,
  request: Request,
  cors: (origin: string | null) => Readonly<Record<string, string>>,
  res: Response,
): Response {
  const trace = traceOf(request);
  const headers = res.headers;
  headers.set("x-request-id", trace.id);
  const granted = cors(request.headers.get("origin"));
  for (const name in granted) headers.set(name, granted[name]!);
  finishTrace(trace, door.route, trace.status ?? res.status);
  return res;
}

/** Builds the HTTP app from services; main listens on it, tests call `app.handle(request)`. */
export function createApp(s: Services) {
  const doors = leanDoors(s);
  const granted = corsHeaders(s.config.corsOrigins);
  return (
    new Elysia()
      // Around the router (Elysia's higher-order function): the path it routes by is read right, or the request
      // refused; a POST to a model endpoint goes to its lean door.
      .wrap(((handle: (r: Request) => unknown, request: Request) => {
        const url = request.url; // built anew on each read
        const r = routable(request, url, pathAt);
        if (r !== request) return r instanceof Response ? () => r : () => handle(r);
        const door = request.method === "POST" ? doors.get(url.slice(pathAt.start)) : undefined;
        return door ? () => serveLean(door, request, handle, s, granted) : handle;
      }) as unknown as Parameters<Elysia["wrap"]>[0])
      // First, so that every answer (errors, the body-size refusal below, streams) carries the CORS headers. A
      // preflight is answered there, before a trace opens: it is neither counted nor logged.
      .use(cors(s.config.corsOrigins))
      .onRequest(({ request, set }) => {
        const trace = startTrace(request);
        set.headers["x-request-id"] = trace.id;
        if (declaredTooLarge(request, s.config)) {
          // Answered before routing: no after-response hook runs, so the request is counted and logged here.
          const res = errorResponse(bodyTooLarge(s.config), shapeFor(request, s));
          finishTrace(trace, undefined, res.status);
          return res;
        }
        if (unboundedBody(request)) set.headers.connection = "close";
      })
      // Every body is read here, under the size limit and the body deadline, before any route sees it.
      .onParse({ as: "global" }, jsonBody(s.config))
      .onAfterResponse((c) => {
        const trace = traceOf(c.request);
        const wallet = (c.params as Record<string, string> | undefined)?.wallet;
        if (trace.wallet === undefined && wallet) trace.wallet = wallet.toLowerCase();
        const value = (c as { responseValue?: unknown }).responseValue;
        const status = trace.status ?? (value instanceof Response ? value.status : typeof c.set.status === "number" ? c.set.status : 200);
        finishTrace(trace, c.route || undefined, status);
      })
      .use(openapiDocs())
      // Before the app's error handler: its route answers errors in OpenAI's shape with its own (Elysia runs the first).
      .use(responsesRoutes(s))
      .onError(({ code, error, request }) => {
        // A model endpoint's 402 INSUFFICIENT_BALANCE gets its x402 terms here, where the request's URL is known.
        const res = renderError(code, s.paidCalls.offerOn(error, request), s, traceOf(request).start, shapeFor(request, s));
        traceOf(request).status = res.status;
        return res;
      })
      .use(healthRoutes(s))
      .use(modelsRoutes(s))
      .use(balanceRoutes(s))
      .use(siweRoutes(s))
      .use(keysRoutes(s))
      .use(usageRoutes(s))
      .use(dailyUsageRoutes(s))
      .use(topupPayRoutes(s))
      .use(topupHistoryRoutes(s))
      .use(wellKnownRoutes(s))
      .use(chatRoutes(s))
      .use(embeddingsRoutes(s))
      .use(messagesRoutes(s))
      .use(metricsRoutes(s))
      .use(dashboardRoutes(s))
  );
}

export type App = ReturnType<typeof createApp>;
