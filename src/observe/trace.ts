import { infoOn, infoVetted, redactText } from "../log.ts";
import { metrics } from "./metrics.ts";
import { boundCounters, boundHistograms, type CounterChild, type HistogramChild } from "./bound.ts";

/**
 * What one request leaves for its access-log line and metrics: filled by the app's hooks (id, timing, status)
 * and by the route that knows more (the chat path: key, wallet, model, upstream time, charge).
 */
export interface RequestTrace {
  id: string;
  /** performance.now() when the request arrived. */
  start: number;
  method: string;
  /** Set where the app renders an error, which the after-response hook cannot always see. */
  status?: number;
  keyId?: number;
  wallet?: string;
  model?: string;
  provider?: string;
  /** Time spent waiting on the provider: the whole answer (JSON) or until its first byte (stream). */
  upstreamMs?: number;
  chargeUsdc?: number;
  stream?: boolean;
  /** A streamed answer: resolves when the stream has ended and its charge is known. */
  streamEnd?: Promise<void>;
  /** Counted and logged already. */
  finished?: boolean;
  /** Started by the app's hook: accessLogIdle() waits for its line. */
  awaited?: boolean;
}

const traces = new WeakMap<Request, RequestTrace>();
// A client's or load balancer's id is kept when it is a plain token; anything else gets a fresh one.
const SAFE_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** A trace not tied to an HTTP request (the chat service called directly). */
export function newTrace(method = "POST", id: string = crypto.randomUUID()): RequestTrace {
  return { id, start: performance.now(), method };
}

// Requests not yet counted and logged: the after-response hook runs after the answer left, and a stream's line
// waits for its end. Tests wait for them through accessLogIdle() instead of sleeping (a stream ended before its
// answer left, as a short one does, has its line written a turn after the hook: counted until then).
let unwritten = 0;
let idleWaiters: (() => void)[] = [];

/** Resolves once every request started so far is counted and has its access-log line (a stream's at its end). */
export function accessLogIdle(): Promise<void> {
  if (unwritten === 0) return Promise.resolve();
  return new Promise((resolve) => idleWaiters.push(resolve));
}

function written(): void {
  if (--unwritten > 0) return;
  const waiters = idleWaiters;
  idleWaiters = [];
  for (const w of waiters) w();
}

/** Opens the trace of a request; returns its id for the `X-Request-Id` header. */
export function startTrace(request: Request): RequestTrace {
  const given = request.headers.get("x-request-id");
  const trace = newTrace(request.method, given && SAFE_ID.test(given) ? given : crypto.randomUUID());
  traces.set(request, trace);
  trace.awaited = true;
  unwritten++;
  return trace;
}

/** The trace of a request (a detached one if the app's hook did not run, so callers never check). */
export function traceOf(request: Request): RequestTrace {
  let trace = traces.get(request);
  if (!trace) traces.set(request, (trace = newTrace(request.method)));
  return trace;
}

// The series every request counts into, bound once per label set (observe/bound.ts).
const httpRequests = boundCounters(metrics.httpRequests);
const httpDuration = boundHistograms(metrics.httpDuration);
const upstreamLatency = boundHistograms(metrics.upstreamLatency);
const addedLatency = boundHistograms(metrics.addedLatency);

/** A route's series (its method and pattern): its duration, and its count per status. */
interface RouteSeries {
  duration: HistogramChild;
  byStatus: Map<number, CounterChild>;
}
// Found by method, then pattern, then status: strings the request already holds and a number, so a request builds
// no key and no labels closure to find its series.
const routeSeries = new Map<string, Map<string, RouteSeries>>();
// A provider's upstream latency, JSON [0] and stream [1]; the added latency likewise.
const providerSeries = new Map<string, [HistogramChild, HistogramChild]>();
const addedSeries = [false, true].map((s) => addedLatency(String(s), () => ({ stream: String(s) })));

function routeOf(method: string, route: string): RouteSeries {
  let byRoute = routeSeries.get(method);
  if (!byRoute) routeSeries.set(method, (byRoute = new Map()));
  let series = byRoute.get(route);
  if (!series) {
    series = { duration: httpDuration(`${method} ${route}`, () => ({ method, route })), byStatus: new Map() };
    byRoute.set(route, series);
  }
  return series;
}

function countOf(method: string, route: string, series: RouteSeries, status: number): CounterChild {
  let child = series.byStatus.get(status);
  if (!child) {
    child = httpRequests(`${method} ${route} ${status}`, () => ({ method, route, status: String(status) }));
    series.byStatus.set(status, child);
  }
  return child;
}

function upstreamOf(provider: string): [HistogramChild, HistogramChild] {
  let pair = providerSeries.get(provider);
  if (!pair) {
    const of = (stream: string) => upstreamLatency(`${provider} ${stream}`, () => ({ provider, stream }));
    providerSeries.set(provider, (pair = [of("false"), of("true")]));
  }
  return pair;
}

/**
 * Counts the request and writes its access-log line: once the response is handed over, or, for a stream, once it
 * ended (so the line carries the charge). `route` is the matched pattern, never the raw path, which could carry a
 * wallet or an `api_key` query and would make one metric series per URL.
 */
export function finishTrace(trace: RequestTrace, route: string | undefined, status: number): void {
  if (trace.finished) return;
  trace.finished = true;
  const latencyMs = performance.now() - trace.start;
  const pattern = route ?? "unmatched";
  const method = trace.method;
  const series = routeOf(method, pattern);
  countOf(method, pattern, series, status).inc();
  series.duration.observe(latencyMs / 1000);
  if (trace.upstreamMs !== undefined) {
    const stream = trace.stream === true ? 1 : 0;
    upstreamOf(trace.provider ?? "unknown")[stream].observe(trace.upstreamMs / 1000);
    addedSeries[stream]!.observe(Math.max(0, latencyMs - trace.upstreamMs) / 1000);
  }
  if (!infoOn()) {
    if (trace.awaited) written();
    return;
  }
  const write = () => {
    try {
      infoVetted("request", accessMembers(trace, pattern, status, latencyMs));
    } finally {
      if (trace.awaited) written();
    }
  };
  if (trace.streamEnd) trace.streamEnd.then(write, write);
  else write();
}

/**
 * The access-log line's members, written as JSON text (no object built, no walk over it). The strings a client chose
 * (its request id, method, a wallet in the path, the model it named) go through redactText, then JSON.stringify;
 * the rest are numbers (finite: written as JSON writes them) and the gateway's own route patterns.
 */
function accessMembers(trace: RequestTrace, route: string, status: number, latencyMs: number): string {
  let m =
    `"request_id":${text(trace.id)},"method":${text(trace.method)},"route":${JSON.stringify(route)},` +
    `"status":${status},"latency_ms":${round(latencyMs)}`;
  if (trace.keyId !== undefined) m += `,"key_id":${trace.keyId}`;
  if (trace.wallet !== undefined) m += `,"wallet":${text(trace.wallet)}`;
  if (trace.model !== undefined) m += `,"model":${text(trace.model)}`;
  if (trace.upstreamMs !== undefined) m += `,"upstream_ms":${round(trace.upstreamMs)}`;
  if (trace.chargeUsdc !== undefined) m += `,"charge_usdc":${trace.chargeUsdc}`;
  if (trace.stream) m += `,"stream":true,"duration_ms":${round(performance.now() - trace.start)}`;
  return m;
}

const text = (s: string) => JSON.stringify(redactText(s));
const round = (ms: number) => Math.round(ms * 100) / 100;
