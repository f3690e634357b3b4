/**
 * The OpenAI Responses API's wire shapes (POST /v1/responses): what its clients send and what they read back.
 * What comes off the wire is not checked by its type: the readers test each field they use, so these types name
 * fields rather than promise them. Field notes: /work/notes/wire-formats.md §1–§4 (from the SDKs' own source).
 */
import { flat } from "../sse.ts";

/** A content part of an input or output message. */
export interface ContentPart {
  type: string;
  text?: string;
  refusal?: string;
  image_url?: string;
  detail?: string;
  file_id?: string;
  file_data?: string;
  file_url?: string;
  filename?: string;
}

/**
 * One item of `input` or `output`: a message, a function or custom tool call, its output, a reference to a stored
 * item, reasoning, tools declared in the conversation (`additional_tools`).
 */
export interface Item {
  type?: string;
  id?: string;
  role?: string;
  status?: string;
  content?: string | ContentPart[];
  call_id?: string;
  name?: string;
  arguments?: string;
  /** A custom_tool_call's freeform input. */
  input?: string;
  /** An additional_tools item's tools (tools.ts declaredTools). */
  tools?: ResponsesTool[];
  /** A function_call of a namespaced tool: the namespace its `name` is in (tools.ts). */
  namespace?: string;
  output?: string | ContentPart[];
  summary?: unknown[];
}

/** A function tool as the Responses API declares it (flat, unlike chat's `{type, function: {...}}`); a custom one's format. */
export interface ResponsesTool {
  type: string;
  name?: string;
  description?: string | null;
  parameters?: unknown;
  strict?: boolean | null;
  format?: { type?: string; syntax?: string; definition?: string };
}

/** The request body of POST /v1/responses (the fields the gateway reads; others are accepted and ignored). */
export type ResponsesRequest = Record<string, unknown> & {
  model: string;
  input?: string | Item[];
  instructions?: string | null;
  max_output_tokens?: number | null;
  temperature?: number | null;
  top_p?: number | null;
  tools?: ResponsesTool[];
  tool_choice?: string | { type: string; name?: string; namespace?: string };
  text?: { format?: { type: string; name?: string; schema?: unknown; strict?: boolean | null; description?: string }; verbosity?: string };
  reasoning?: { effort?: string | null; summary?: string | null } | null;
  stream?: boolean;
  store?: boolean | null;
  previous_response_id?: string | null;
  metadata?: Record<string, string> | null;
  parallel_tool_calls?: boolean | null;
};

/** Usage as the Responses API reports it; charge_usdc: what the gateway charged for the request, µUSDC. */
export interface ResponsesUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number; cache_write_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
  charge_usdc?: number;
}

type ChatUsage = {
  prompt_tokens?: number;
  completion_tokens?: number;
  prompt_tokens_details?: { cached_tokens?: number; cache_write_tokens?: number };
  completion_tokens_details?: { reasoning_tokens?: number };
  charge_usdc?: number;
};

/** Chat-completions usage (the core's answer) as the Responses API reports it. */
export function responsesUsage(u: ChatUsage): ResponsesUsage {
  const input = u.prompt_tokens ?? 0;
  const output = u.completion_tokens ?? 0;
  const out: ResponsesUsage = {
    input_tokens: input,
    input_tokens_details: {
      cached_tokens: u.prompt_tokens_details?.cached_tokens ?? 0,
      cache_write_tokens: u.prompt_tokens_details?.cache_write_tokens ?? 0,
    },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: u.completion_tokens_details?.reasoning_tokens ?? 0 },
    total_tokens: input + output,
  };
  if (u.charge_usdc !== undefined) out.charge_usdc = u.charge_usdc;
  return out;
}

/** responsesUsage's JSON: written as text when its counts are safe integers (as usage comes), else serialised. */
export function responsesUsageJson(u: ChatUsage): string {
  const input = u.prompt_tokens ?? 0;
  const output = u.completion_tokens ?? 0;
  const cached = u.prompt_tokens_details?.cached_tokens ?? 0;
  const written = u.prompt_tokens_details?.cache_write_tokens ?? 0;
  const reasoning = u.completion_tokens_details?.reasoning_tokens ?? 0;
  const charge = u.charge_usdc;
  const safe = [input, output, cached, written, reasoning].every(Number.isSafeInteger);
  if (!safe || (charge !== undefined && !Number.isSafeInteger(charge))) return JSON.stringify(responsesUsage(u));
  return (
    `{"input_tokens":${input},"input_tokens_details":{"cached_tokens":${cached},"cache_write_tokens":${written}},"output_tokens":${output}` +
    `,"output_tokens_details":{"reasoning_tokens":${reasoning}},"total_tokens":${input + output}` +
    (charge === undefined ? "}" : `,"charge_usdc":${charge}}`)
  );
}

// Random bytes drawn a few kilobytes at a time: one crypto call per 256 ids instead of a randomUUID (and its dashes
// taken out) per id.
const ID_BYTES = 20;
const pool = Buffer.alloc(ID_BYTES * 256);
let poolAt = pool.length;
let hexOf = 0;
let secondHex = "";

/**
 * A new id with OpenAI's prefix for its kind (resp_, msg_, fc_, ctc_), then, as OpenAI's own ids, the second it was made
 * (8 hex digits) and random hex (40 digits): a store that misses an id made a moment ago knows the write may still
 * be on its way (idSecond).
 */
export function newId(prefix: "resp" | "msg" | "fc" | "ctc"): string {
  if (poolAt === pool.length) {
    crypto.getRandomValues(pool);
    poolAt = 0;
  }
  poolAt += ID_BYTES;
  const second = Math.floor(Date.now() / 1000);
  if (second !== hexOf) {
    hexOf = second;
    secondHex = second.toString(16).padStart(8, "0");
  }
  return `${prefix}_${secondHex}${pool.toString("hex", poolAt - ID_BYTES, poolAt)}`;
}

/** The second (Unix time) an id of newId was made, or undefined for an id not of that form. */
export function idSecond(id: string): number | undefined {
  const m = /^(?:resp|msg|fc|ctc)_([0-9a-f]{8})[0-9a-f]{40}$/.exec(id);
  return m ? Number.parseInt(m[1]!, 16) : undefined;
}

/** A `response` object's JSON with these error and incomplete_details values (JSON text) and `rest` after the frame. */
export type Frame = (error: string, details: string, rest: string) => string;

// A request's value as JSON, or the default the Responses API reports when it is absent (JSON text).
const or = (v: unknown, fallback: string) => (v === undefined || v === null ? fallback : JSON.stringify(v));

/**
 * One answer's frame, the `response` object without its output, status and usage, echoing the request's settings
 * as OpenAI does, written as text once per request: `(error, details, rest)` → the object's JSON with those
 * error and incomplete_details values in their places and `rest` (its own fields, each `,"key":value`) after the
 * frame's. The JSON answer and every stream lifecycle event share it (`stream`: the frame is for a stream).
 */
export function responseFrame(id: string, body: ResponsesRequest, stream = false): Frame {
  const pre = `{"id":"${id}","object":"response","created_at":${Math.floor(Date.now() / 1000)},"model":${JSON.stringify(body.model)},"error":`;
  const r = body.reasoning;
  const post =
    `,"instructions":${or(body.instructions, "null")},"max_output_tokens":${or(body.max_output_tokens, "null")}` +
    `,"parallel_tool_calls":${or(body.parallel_tool_calls, "true")},"previous_response_id":${or(body.previous_response_id, "null")}` +
    `,"reasoning":{"effort":${or(r?.effort, "null")},"summary":${or(r?.summary, "null")}},"store":${body.store !== false}` +
    `,"temperature":${or(body.temperature, "1")},"text":${or(body.text, '{"format":{"type":"text"}}')}` +
    `,"tool_choice":${or(body.tool_choice, '"auto"')},"tools":${or(body.tools, "[]")},"top_p":${or(body.top_p, "1")}` +
    `,"truncation":"disabled","user":null,"metadata":${or(body.metadata, "{}")}`;
  // A stream's three lifecycle events each hold them: flat once here (sse.ts flat), not copied piece by piece thrice.
  if (stream) {
    flat(pre);
    flat(post);
  }
  return (error, details, rest) => `${pre}${error},"incomplete_details":${details}${post}${rest}}`;
}

/** The text of every output_text part of every message item (what openai-node exposes as `output_text`). */
export function outputText(output: Item[]): string {
  let text = "";
  for (const item of output) {
    if (item.type !== "message" || !Array.isArray(item.content)) continue;
    for (const part of item.content) if (part.type === "output_text") text += part.text ?? "";
  }
  return text;
}
