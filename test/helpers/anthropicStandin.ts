/**
 * A local model provider speaking Anthropic's Messages API wire format: x-api-key and anthropic-version headers,
 * request validation the way the real API refuses things (unknown fields, roles that do not alternate, a
 * tool_result without its tool_use, thinking rules per model), JSON answers, SSE with `event:` lines, ping
 * events and in-stream error events, and error bodies `{type: "error", error: {type, message}}`.
 *
 * The upstream model name picks a failure mode; any other name answers normally:
 *   overloaded (529) · rate-limited (429) · invalid (400) · api-error (500) · stream-overloaded (error event
 *   after the first words) · hang (three words, then silence until the client goes) · slow (2 s before answering)
 *   · greedy (bills the most it may: every byte of the body as input tokens, the whole max_tokens as output)
 *   · cached (reports CACHED cache reads and writes beside input_tokens, which excludes them, as the real API does)
 *   · cached-1h (the same, its writes split by lifetime in `cache_creation`: CACHED_1H, as the API reports them)
 *   · greedy-1h (like greedy, but every byte of the body reported as a 1-hour cache write, the dearest input)
 * A normal answer depends on the request: thinking first when thinking is on; with tools and no tool result yet,
 * a sentence and a call of the first (or the forced) tool; after a tool result, the weather; else REPLY.
 * Names containing 4-7 take only adaptive thinking and no sampling parameters, names containing 3-5 no thinking,
 * names containing 4-5 only the budget form: what the real models of those versions do.
 */
import { STANDIN_KEY } from "./catalog.ts";

export const REPLY = ["Hi", " from", " the", " Claude", " stand", "-in"];
export const THINKING = ["Let", " me", " think", "."];
export const SIGNATURE = "c2lnbmF0dXJlLW9mLXRoZS1zdGFuZC1pbg==";
export const TOOL_INTRO = ["Let", " me", " check", "."];
export const TOOL_JSON = ["", '{"city": ', '"Paris", ', '"unit": "celsius"}'];
export const TOOL_ID = "toolu_01StandinCall";
export const AFTER_TOOL = ["It", " is", " sunny", " in", " Paris", "."];
/** What the "cached" model reports as read from and written to its prompt cache, beside input_tokens. */
export const CACHED = { read: 40, write: 12 };
/** The "cached-1h" model's writes by lifetime (their sum is CACHED.write). */
export const CACHED_1H = { ephemeral_5m_input_tokens: 4, ephemeral_1h_input_tokens: 8 };

export interface AnthropicStandin {
  url: string;
  requests: Record<string, any>[];
  headers: Record<string, string | null>[];
  /** What the "greedy" model billed for each of its requests, in order. */
  billed: { input_tokens: number; output_tokens: number }[];
  /** Streams the gateway stopped before their end (the client went away). */
  cancelled: number;
  /** Resolves once `n` streams have been stopped: the server learns of a closed connection a little later. */
  cancelledAtLeast(n: number): Promise<void>;
  stop(): void;
}

type Obj = Record<string, any>;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function error(status: number, type: string, message: string, headers: Record<string, string> = {}) {
  return Response.json({ type: "error", error: { type, message } }, { status, headers: { "request-id": "req_standin", ...headers } });
}

const ALLOWED = new Set([
  "model",
  "messages",
  "max_tokens",
  "system",
  "stop_sequences",
  "temperature",
  "top_p",
  "top_k",
  "stream",
  "tools",
  "tool_choice",
  "thinking",
  "metadata",
  "output_config",
]);

/** Refuses what the real API refuses; returns the message of its 400, or null. */
function validate(b: Obj): string | null {
  for (const k of Object.keys(b)) if (!ALLOWED.has(k)) return `${k}: Extra inputs are not permitted`;
  if (typeof b.model !== "string") return "model: Field required";
  if (!Number.isSafeInteger(b.max_tokens) || b.max_tokens < 1) return "max_tokens: Field required";
  if (!Array.isArray(b.messages) || b.messages.length === 0) return "messages: Field required";
  if (b.system !== undefined && typeof b.system !== "string") {
    if (!Array.isArray(b.system) || b.system.some((s: Obj) => s.type !== "text" || !s.text))
      return "system: Input should be a valid list of text blocks";
  }
  let previous: Obj | undefined;
  for (const [i, m] of (b.messages as Obj[]).entries()) {
    if (m.role !== "user" && m.role !== "assistant") return `messages.${i}.role: Input should be 'user' or 'assistant'`;
    if (previous?.role === m.role) return 'messages: roles must alternate between "user" and "assistant"';
    const blocks: Obj[] = typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content;
    if (!Array.isArray(blocks) || blocks.length === 0) return `messages.${i}.content: must be non-empty`;
    for (const blk of blocks) {
      if (blk.type === "text" && !blk.text) return `messages.${i}: text content blocks must be non-empty`;
      if (blk.type === "tool_use" && m.role !== "assistant") return `messages.${i}: tool_use only in assistant turns`;
      if (blk.type === "tool_result") {
        const prior = typeof previous?.content === "string" ? [] : (previous?.content ?? []);
        if (!prior.some((p: Obj) => p.type === "tool_use" && p.id === blk.tool_use_id)) {
          return `messages.${i}: unexpected tool_use_id found in tool_result blocks: ${blk.tool_use_id}`;
        }
      }
      if (!["text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking"].includes(blk.type))
        return `messages.${i}: unknown block type`;
    }
    previous = m;
  }
  if (b.temperature !== undefined && (b.temperature < 0 || b.temperature > 1)) return "temperature: must be between 0 and 1";
  for (const t of b.tools ?? [])
    if (typeof t.name !== "string" || typeof t.input_schema !== "object") return "tools: name and input_schema required";
  if (b.tool_choice && !["auto", "any", "tool", "none"].includes(b.tool_choice.type)) return "tool_choice.type: invalid";
  const adaptiveOnly = b.model.includes("4-7");
  if (adaptiveOnly && ["temperature", "top_p", "top_k"].some((k) => b[k] !== undefined)) return "temperature: not supported for this model";
  // Effort bounds every token of the answer, with or without thinking (Claude Code's title request sends it with
  // thinking disabled).
  const effort = b.output_config?.effort;
  if (effort !== undefined && !["low", "medium", "high", "xhigh", "max"].includes(effort)) return "output_config.effort: invalid";
  if (b.thinking) {
    const t = b.thinking;
    if (b.model.includes("3-5")) return "thinking: not supported for this model";
    if (t.type === "enabled") {
      if (adaptiveOnly) return '"thinking.type.enabled" is not supported for this model. Use "thinking.type.adaptive"';
      if (!Number.isSafeInteger(t.budget_tokens) || t.budget_tokens < 1024) return "thinking.budget_tokens: must be ≥ 1024";
      if (t.budget_tokens >= b.max_tokens) return "max_tokens must be greater than thinking.budget_tokens";
    } else if (t.type === "adaptive") {
      if (b.model.includes("4-5")) return "thinking.type.adaptive is not supported for this model";
    } else if (t.type !== "disabled") return "thinking.type: invalid";
    if (t.type !== "disabled") {
      if (b.temperature !== undefined && b.temperature !== 1) return "temperature may only be set to 1 when thinking is enabled";
      if (b.top_k !== undefined) return "top_k is not supported when thinking is enabled";
      if (b.top_p !== undefined && b.top_p < 0.95) return "top_p must be at least 0.95 when thinking is enabled";
    }
  }
  return null;
}

/** What Claude (up to 4.6) bills an image at most, whatever its bytes: ~1.15 MP after resizing, at 750 px a token. */
export const IMAGE_TOKENS = 1_600;

function imagesIn(blocks: unknown): number {
  if (!Array.isArray(blocks)) return 0;
  return blocks.reduce(
    (n: number, blk: Obj) => n + (blk?.type === "image" ? 1 : blk?.type === "tool_result" ? imagesIn(blk.content) : 0),
    0,
  );
}

/** Input tokens the stand-in reports for a request: deterministic, so tests know the exact charge. */
export function inputTokensFor(b: Obj): number {
  const images = (b.messages as Obj[]).reduce((n, m) => n + imagesIn(m.content), 0);
  return 10 * b.messages.length + (b.system ? 5 : 0) + 100 * (b.tools?.length ?? 0) + 3 + IMAGE_TOKENS * images;
}

type Block = { type: "text"; words: string[] } | { type: "thinking"; words: string[] } | { type: "tool_use"; name: string };

/** What a normal answer consists of, and why it stops. */
export function planFor(b: Obj): { blocks: Block[]; stop: string; stopSequence: string | null; outputTokens: number } {
  const blocks: Block[] = [];
  if (b.thinking && b.thinking.type !== "disabled") blocks.push({ type: "thinking", words: THINKING });
  const last = b.messages.at(-1);
  const answered = Array.isArray(last.content) && last.content.some((c: Obj) => c.type === "tool_result");
  let stop = "end_turn";
  let stopSequence: string | null = null;
  if (b.tools?.length && !answered && b.tool_choice?.type !== "none") {
    const name = b.tool_choice?.type === "tool" ? b.tool_choice.name : b.tools[0].name;
    blocks.push({ type: "text", words: TOOL_INTRO }, { type: "tool_use", name });
    stop = "tool_use";
  } else {
    let words = answered ? AFTER_TOOL : REPLY;
    const at = words.findIndex((w) => (b.stop_sequences ?? []).some((s: string) => w.includes(s)));
    if (at >= 0) {
      stopSequence = b.stop_sequences.find((s: string) => words[at]!.includes(s));
      words = words.slice(0, at);
      stop = "stop_sequence";
    }
    blocks.push({ type: "text", words });
  }
  // Every word and JSON fragment counts as one token.
  let outputTokens = 0;
  for (const blk of blocks) outputTokens += blk.type === "tool_use" ? TOOL_JSON.length : blk.words.length;
  if (outputTokens > b.max_tokens) {
    // A budget smaller than the answer: cut the text, as the real API stops at max_tokens.
    const text = blocks.find((x) => x.type === "text") as { words: string[] };
    text.words = text.words.slice(0, Math.max(0, text.words.length - (outputTokens - b.max_tokens)));
    outputTokens = b.max_tokens;
    stop = "max_tokens";
  }
  return { blocks, stop, stopSequence, outputTokens };
}

function messageJson(b: Obj, plan: ReturnType<typeof planFor>, inputTokens = inputTokensFor(b)) {
  const cached = b.model === "cached" || b.model === "cached-1h";
  const content = plan.blocks.map((blk) => {
    if (blk.type === "thinking") return { type: "thinking", thinking: blk.words.join(""), signature: SIGNATURE };
    if (blk.type === "tool_use") return { type: "tool_use", id: TOOL_ID, name: blk.name, input: JSON.parse(TOOL_JSON.join("")) };
    return { type: "text", text: blk.words.join("") };
  });
  return {
    id: "msg_01StandinMessage",
    type: "message",
    role: "assistant",
    model: b.model,
    content,
    stop_reason: plan.stop,
    stop_sequence: plan.stopSequence,
    usage: {
      input_tokens: inputTokens,
      cache_creation_input_tokens: cached ? CACHED.write : 0,
      cache_read_input_tokens: cached ? CACHED.read : 0,
      ...(b.model === "cached-1h" && { cache_creation: CACHED_1H }),
      ...(b.model === "greedy-1h" && {
        input_tokens: 0,
        cache_creation_input_tokens: inputTokens,
        cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: inputTokens },
      }),
      output_tokens: plan.outputTokens,
    },
  };
}

const sse = (event: string, data: unknown) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;

/** Starts the stand-in on a free port; `record: false` keeps no request (the benchmark's long runs). */
export function startAnthropicStandin(opts: { record?: boolean } = {}): AnthropicStandin {
  const record = opts.record !== false;
  let waiters: { n: number; resolve: () => void }[] = [];
  const state: AnthropicStandin = {
    url: "",
    requests: [],
    headers: [],
    billed: [],
    cancelled: 0,
    cancelledAtLeast: (n) => new Promise<void>((resolve) => (state.cancelled >= n ? resolve() : waiters.push({ n, resolve }))),
    stop: () => server.stop(true),
  };
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    idleTimeout: 0,
    async fetch(req) {
      const url = new URL(req.url);
      if (req.method !== "POST" || url.pathname !== "/v1/messages") return error(404, "not_found_error", "Not found");
      if (record)
        state.headers.push({
          "x-api-key": req.headers.get("x-api-key"),
          "anthropic-version": req.headers.get("anthropic-version"),
          authorization: req.headers.get("authorization"),
        });
      if (req.headers.get("x-api-key") !== STANDIN_KEY) return error(401, "authentication_error", "invalid x-api-key");
      if (req.headers.get("anthropic-version") !== "2023-06-01") return error(400, "invalid_request_error", "anthropic-version: invalid");
      const raw = await req.text();
      const b = JSON.parse(raw) as Obj;
      if (record) state.requests.push(b);
      const problem = validate(b);
      if (problem) return error(400, "invalid_request_error", problem);

      const mode = b.model;
      if (mode === "overloaded") return error(529, "overloaded_error", "Overloaded");
      if (mode === "rate-limited")
        return error(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit", { "retry-after": "7" });
      if (mode === "invalid") return error(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum");
      if (mode === "api-error") return error(500, "api_error", "Internal server error");
      if (mode === "slow") await sleep(2_000);
      if (mode === "hang" && !b.stream) {
        await new Promise((resolve) => req.signal.addEventListener("abort", resolve));
        return error(500, "api_error", "gone");
      }

      const plan = planFor(b);
      let input = inputTokensFor(b);
      if (mode === "greedy" || mode === "greedy-1h") {
        // Every byte a token (no tokenizer does better), and the answer billed as if it ran to max_tokens, thinking
        // included (Anthropic bills thinking as output, within max_tokens).
        input = Buffer.byteLength(raw);
        plan.outputTokens = b.max_tokens;
        plan.stop = "max_tokens";
        state.billed.push({ input_tokens: input, output_tokens: plan.outputTokens });
      }
      if (!b.stream) return Response.json(messageJson(b, plan, input), { headers: { "request-id": "req_standin" } });

      const enc = new TextEncoder();
      const stream = new ReadableStream<Uint8Array>({
        async start(ctrl) {
          const send = (event: string, data: unknown) => ctrl.enqueue(enc.encode(sse(event, data)));
          const start = messageJson(b, plan, input);
          send("message_start", {
            type: "message_start",
            message: {
              ...start,
              content: [],
              stop_reason: null,
              stop_sequence: null,
              usage: { ...start.usage, output_tokens: 1 },
            },
          });
          let sent = 0;
          for (const [index, blk] of plan.blocks.entries()) {
            if (blk.type === "tool_use") {
              send("content_block_start", {
                type: "content_block_start",
                index,
                content_block: { type: "tool_use", id: TOOL_ID, name: blk.name, input: {} },
              });
              for (const part of TOOL_JSON)
                send("content_block_delta", {
                  type: "content_block_delta",
                  index,
                  delta: { type: "input_json_delta", partial_json: part },
                });
            } else if (blk.type === "thinking") {
              send("content_block_start", { type: "content_block_start", index, content_block: { type: "thinking", thinking: "" } });
              for (const w of blk.words)
                send("content_block_delta", { type: "content_block_delta", index, delta: { type: "thinking_delta", thinking: w } });
              send("content_block_delta", { type: "content_block_delta", index, delta: { type: "signature_delta", signature: SIGNATURE } });
            } else {
              send("content_block_start", { type: "content_block_start", index, content_block: { type: "text", text: "" } });
              if (index === 0) send("ping", { type: "ping" });
              for (const w of blk.words) {
                if (mode === "stream-overloaded" && sent === 2) {
                  send("error", { type: "error", error: { type: "overloaded_error", message: "Overloaded" } });
                  return ctrl.close();
                }
                if (mode === "hang" && sent === 3) return; // silence: the stream stays open until cancelled
                send("content_block_delta", { type: "content_block_delta", index, delta: { type: "text_delta", text: w } });
                sent++;
              }
            }
            send("content_block_stop", { type: "content_block_stop", index });
          }
          // The closing events split across writes, as a network may deliver them.
          const delta = sse("message_delta", {
            type: "message_delta",
            delta: { stop_reason: plan.stop, stop_sequence: plan.stopSequence },
            usage: { output_tokens: plan.outputTokens },
          });
          ctrl.enqueue(enc.encode(delta.slice(0, 25)));
          await sleep(1);
          ctrl.enqueue(enc.encode(delta.slice(25)));
          send("message_stop", { type: "message_stop" });
          ctrl.close();
        },
        cancel() {
          state.cancelled++;
          waiters = waiters.filter((w) => (w.n <= state.cancelled ? (w.resolve(), false) : true));
        },
      });
      return new Response(stream, {
        headers: { "content-type": "text/event-stream", "cache-control": "no-cache", "request-id": "req_standin" },
      });
    },
  });
  state.url = `http://127.0.0.1:${server.port}/v1`;
  return state;
}
