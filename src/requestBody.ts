import type { Config } from "./config.ts";
import { withDeadline } from "./deadline.ts";
import { ApiError } from "./errors.ts";

/** How much of a request body the gateway reads, and how long it waits for it (MAX_BODY_BYTES, BODY_TIMEOUT_MS). */
export type BodyLimits = Pick<Config, "maxBodyBytes" | "bodyTimeoutMs">;

// Both refusals leave the rest of the body unread, so the connection cannot carry another request: Bun closes it
// once the answer is written, and a client trickling its body loses its connection, not only its request.
const CLOSE = { connection: "close" };

/** 413 PAYLOAD_TOO_LARGE: the body is (or would be) longer than the limit. */
export function bodyTooLarge(limits: BodyLimits): ApiError {
  return new ApiError({
    code: "PAYLOAD_TOO_LARGE",
    message: `Request body too large (at most ${limits.maxBodyBytes} bytes)`,
    headers: CLOSE,
  });
}

function bodyTooSlow(limits: BodyLimits): ApiError {
  return new ApiError({ code: "REQUEST_TIMEOUT", message: `Request body not received within ${limits.bodyTimeoutMs} ms`, headers: CLOSE });
}

/** A Content-Length above the limit: refused before a byte of the body is read. */
export function declaredTooLarge(request: Request, limits: BodyLimits): boolean {
  const length = request.headers.get("content-length");
  return length !== null && Number(length) > limits.maxBodyBytes;
}

// A body without Content-Length (chunked) is counted as it arrives and refused at the first byte past the limit.
async function readCapped(body: ReadableStream<Uint8Array>, limits: BodyLimits, late: AbortSignal): Promise<string> {
  const reader = body.getReader();
  late.addEventListener("abort", () => reader.cancel().catch(() => {}), { once: true });
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limits.maxBodyBytes) {
      reader.cancel().catch(() => {});
      throw bodyTooLarge(limits);
    }
    chunks.push(value);
  }
  return new TextDecoder().decode(Buffer.concat(chunks));
}

/**
 * The whole body as text, within the size limit (413) and the body deadline counted from now, i.e. from its
 * headers (408). A declared length was checked before (`declaredTooLarge`) and Bun delivers no more than it.
 */
export async function readBody(request: Request, limits: BodyLimits): Promise<string> {
  const body = request.body;
  if (!body) return "";
  const late = () => bodyTooSlow(limits);
  // refused late: the read fails when the connection closes, and nobody waits for it
  const quiet = (text: Promise<string>) => (text.catch(() => {}), text);
  // A declared length is read whole by Bun: the work takes no signal, so no AbortController is made for it.
  if (request.headers.has("content-length")) return withDeadline(limits.bodyTimeoutMs, () => quiet(request.text()), late);
  return withDeadline(limits.bodyTimeoutMs, (signal) => quiet(readCapped(body, limits, signal)), late);
}

/**
 * The parse hook of every route with a body: JSON (the spec's only body type, whatever Content-Type a client
 * sends), read under the limits. An empty body is left to the route's own parser (`parse: "json"`), which
 * refuses it where a body is required and reads it as none where it is optional.
 */
export function jsonBody(limits: BodyLimits) {
  return async ({ request }: { request: Request }): Promise<unknown> => {
    const text = await readBody(request, limits);
    return text === "" ? undefined : JSON.parse(text);
  };
}

/**
 * Bun.serve's own limits. No body cap of Bun's: it refuses a Content-Length above its cap before the app sees the
 * request, with an empty 413, so any finite cap would answer a large enough declared body outside the spec's
 * shape. The app refuses every declared length past MAX_BODY_BYTES first thing (`declaredTooLarge`, connection
 * closed), reads a chunked body capped, and closes the connection of a chunked request it may not read
 * (`unboundedBody`), so no body is drained past the limit. The idle timeout (IDLE_TIMEOUT_S; 0, none, by default
 * here for test servers) closes a connection on which no byte moved for that long: a keep-alive connection left
 * idle. A request that may wait in silence longer gets its own (`withRequestTimeouts`). Bun closes a connection
 * whose headers are not complete within ~10 s by itself.
 */
export function serverLimits(idleTimeoutS = 0): { idleTimeout: number; maxRequestBodySize: number } {
  return { idleTimeout: idleTimeoutS, maxRequestBodySize: Number.MAX_SAFE_INTEGER };
}

// Bun's idle timeouts are whole seconds up to 255.
const BUN_MAX_IDLE_S = 255;

/**
 * How long a POST (a model call, a top-up's settle) may go without a byte moving: a provider's answer or a stream's
 * gap (UPSTREAM_TIMEOUT_MS), a body (BODY_TIMEOUT_MS), a verify and a settle (FACILITATOR_TIMEOUT_MS each), with 10 s
 * to spare, and never less than the idle timeout; 0 (none) past Bun's 255 s.
 */
export function requestWaitS(config: Pick<Config, "upstreamTimeoutMs" | "bodyTimeoutMs" | "idleTimeoutS" | "payments">): number {
  const ms = Math.max(config.upstreamTimeoutMs, config.bodyTimeoutMs, 2 * config.payments.facilitatorTimeoutMs);
  const s = Math.max(Math.ceil(ms / 1000) + 10, config.idleTimeoutS);
  return s > BUN_MAX_IDLE_S ? 0 : s;
}

/**
 * The fetch handler Bun serves: a POST gets `waitS` as its connection's idle timeout (which then stays the
 * connection's: a keep-alive connection that carried a POST is closed after that long idle, still bounded), so a
 * model call waiting on its provider, or a stream paused as long as its provider may pause, is not cut.
 */
export function withRequestTimeouts(
  fetch: (request: Request) => Response | Promise<Response>,
  waitS: number,
): (request: Request, server: ReturnType<typeof Bun.serve>) => Response | Promise<Response> {
  return (request, server) => {
    if (request.method === "POST") server.timeout(request, waitS);
    return fetch(request);
  };
}

/**
 * A body without Content-Length (chunked): a route that reads no body (a GET, a 404) would leave Bun draining it
 * for as long as the client sends, so the answer closes the connection. Clients that send one are rare (SDKs
 * send Content-Length); a read one is capped by `readBody` all the same.
 */
export function unboundedBody(request: Request): boolean {
  return !request.headers.has("content-length") && request.headers.has("transfer-encoding");
}
