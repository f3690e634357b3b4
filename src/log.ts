/** JSON-lines logger. Secrets are redacted here so no call site can leak a key, signature or SIWE message. */
import { writeSync } from "node:fs";

const LEVELS = { debug: 10, info: 20, warn: 30, error: 40 } as const;
export type LogLevel = keyof typeof LEVELS;

const SECRET_FIELDS = /^(authorization|api_?key|key|signature|message|x-payment|payment-signature|password|private_?key)$/i;
const SECRET_PATTERNS: [RegExp, string | ((...groups: string[]) => string)][] = [
  // The gateway's keys (sk-<hex>) and providers' (OpenAI sk-proj-…, Anthropic sk-ant-api03-…, OpenRouter sk-or-v1-…,
  // Stripe-style sk_live_…, Groq gsk_…, xAI xai-…), Google's AIza…, and any bearer token.
  [/\b(sk|gsk|xai)[-_][A-Za-z0-9_-]{8,}/g, "$1-[redacted]"],
  [/\bAIza[0-9A-Za-z_-]{20,}/g, "AIza[redacted]"],
  [/\b([Bb]earer +)[A-Za-z0-9._~+/=-]{8,}/g, "$1[redacted]"],
  [/0x[0-9a-fA-F]{130,}/g, "0x[signature]"],
  [/([?&](api_key|signature|message)=)[^&\s"]*/g, "$1[redacted]"],
  // A URL's credentials and everything after its host: node providers put the API key in the path
  // (https://base-mainnet.g.alchemy.com/v2/<key>, Infura's /v3/<key>, QuickNode's /<token>/) or the query.
  [
    /\b((?:https?|wss?):\/\/)([^\s/?#@"'<>,]*@)?([^\s/?#"'<>,]+)([/?#][^\s"'<>,]*)?/gi,
    (_m: string, scheme: string, userinfo?: string, host?: string, rest?: string) =>
      `${scheme}${userinfo ? "[redacted]@" : ""}${host}${rest && rest !== "/" ? "/[redacted]" : (rest ?? "")}`,
  ],
];

// What the secret patterns above need somewhere in the text ("sk-", "xai_", "AIza", "earer ", 130 hex digits after
// "0x", "=", "://"): most strings (ids, routes, model names, wallet addresses) have none of it and skip the
// replacements, which were a third of the access log's cost per request. One regular expression scans the string
// once (nine `includes` scanned it nine times: ~4× the time for the access log's four strings).
const MAY_HOLD_SECRET = /sk[-_]|=|:\/\/|xai[-_]|AIza|earer /;
function mayHoldSecret(s: string): boolean {
  return MAY_HOLD_SECRET.test(s) || (s.length >= 132 && s.includes("0x"));
}

/** Masks secret-looking values inside a free-text string (URLs with query strings, error texts). */
export function redactText(s: string): string {
  if (!mayHoldSecret(s)) return s;
  for (const [re, rep] of SECRET_PATTERNS) s = s.replace(re, rep as string);
  return s;
}

function redact(value: unknown, depth = 0): unknown {
  if (typeof value === "string") return redactText(value);
  if (value instanceof Error) return { name: value.name, message: redactText(value.message) };
  if (depth > 4 || value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map((v) => redact(v, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = SECRET_FIELDS.test(k) ? "[redacted]" : redact(v, depth + 1);
  return out;
}

let threshold: number = LEVELS.info;
let allToStderr = false;

/** The admin command's stdout carries its answer alone: every log line goes to stderr instead. */
export function logToStderr(): void {
  allToStderr = true;
}

/** Where a finished line goes; tests swap it to read what the gateway logs (never the real streams' job). */
export type LogSink = (line: string, level: LogLevel) => void;

/** The standard streams: warnings and errors to stderr, the rest to stdout (all to stderr under `logToStderr`). */
export const standardSink: LogSink = (line, level) => {
  if (allToStderr || LEVELS[level] >= LEVELS.warn) process.stderr.write(line + "\n");
  else process.stdout.write(line + "\n");
};
let sink: LogSink = standardSink;

// The buffered stdout of a serving gateway: info lines (one access-log line per request) leave in one write per
// FLUSH_MS or per FLUSH_BYTES instead of a write each, which cost as much as the rest of the line.
const FLUSH_MS = 50;
const FLUSH_BYTES = 64 * 1024;
let pending: string[] = [];
let pendingBytes = 0;
let flushTimer: ReturnType<typeof setTimeout> | undefined;

function flushStdout(): void {
  clearTimeout(flushTimer);
  flushTimer = undefined;
  if (pending.length === 0) return;
  const lines = pending;
  pending = [];
  pendingBytes = 0;
  if (!sharedStdout) return void process.stdout.write(lines.join(""));
  // Several processes write to one stdout: a write of at most PIPE_BUF bytes is never interleaved with another's,
  // so lines leave in whole-line writes of at most that size (a longer line alone).
  let chunk = "";
  for (const line of lines) {
    if (chunk.length > 0 && chunk.length + line.length > PIPE_BUF) (process.stdout.write(chunk), (chunk = ""));
    chunk += line;
  }
  process.stdout.write(chunk);
}

const PIPE_BUF = 4096;
let sharedStdout = false;

/** WORKERS > 1: the gateway's processes share one stdout, so the access log must stay whole lines. */
export function shareStdout(): void {
  sharedStdout = true;
}

const bufferedSink: LogSink = (line, level) => {
  if (allToStderr || LEVELS[level] >= LEVELS.warn) {
    flushStdout(); // what was logged before a warning reads before it
    process.stderr.write(line + "\n");
    return;
  }
  pending.push(line + "\n");
  pendingBytes += line.length + 1;
  if (pendingBytes >= FLUSH_BYTES) flushStdout();
  else if (!flushTimer) (flushTimer = setTimeout(flushStdout, FLUSH_MS)).unref();
};

/**
 * The serving gateway's stdout lines are buffered (at most FLUSH_MS, FLUSH_BYTES); what is left is written at exit.
 * A crash that kills the process outright can lose the last FLUSH_MS of info lines, never a warning or an error.
 */
export function bufferStdout(): void {
  sink = bufferedSink;
  process.on("exit", () => {
    if (pending.length > 0) writeSync(1, pending.join(""));
    pending = [];
  });
}

/** Sends log lines to `s` instead of stdout/stderr; null restores the standard streams. */
export function setLogSink(s: LogSink | null): void {
  sink = s ?? standardSink;
}

/** Sets the level once from configuration. */
export function setLogLevel(level: LogLevel): void {
  threshold = LEVELS[level];
}

function emit(level: LogLevel, msg: string, fields?: Record<string, unknown>): void {
  if (LEVELS[level] < threshold) return;
  sink(JSON.stringify({ t: new Date().toISOString(), level, msg, ...(fields ? (redact(fields) as object) : {}) }), level);
}

// The last timestamp written, by its millisecond: a busy gateway writes several lines per millisecond.
let stampMs = Number.NaN;
let stamp = "";

function isoNow(): string {
  const now = Date.now();
  if (now !== stampMs) {
    stampMs = now;
    stamp = new Date(now).toISOString();
  }
  return stamp;
}

/** Whether an info line would be written (the caller can skip building it). */
export function infoOn(): boolean {
  return LEVELS.info >= threshold;
}

/**
 * An info line whose fields the caller wrote as JSON members (`"name":value,…`, no braces) from values that are
 * safe to log as they are (numbers, its own ids and patterns) or passed through redactText itself: the access log,
 * one line per request, skips the generic walk over its fields (a copy of every field and a secret-name test per
 * key) and the object it would build.
 */
export function infoVetted(msg: string, members: string): void {
  if (LEVELS.info < threshold) return;
  sink(`{"t":"${isoNow()}","level":"info","msg":${JSON.stringify(msg)}${members === "" ? "}" : "," + members + "}"}`, "info");
}

/** The process logger. */
export const log = {
  debug: (msg: string, f?: Record<string, unknown>) => emit("debug", msg, f),
  info: (msg: string, f?: Record<string, unknown>) => emit("info", msg, f),
  warn: (msg: string, f?: Record<string, unknown>) => emit("warn", msg, f),
  error: (msg: string, f?: Record<string, unknown>) => emit("error", msg, f),
};
