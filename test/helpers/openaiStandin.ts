/**
 * A local model provider speaking OpenAI's chat-completions wire format (JSON, SSE with the usage chunk, error
 * bodies). The upstream model name picks the behaviour, so tests need no shared mutable state:
 *   echo (default) · no-usage · fail-400 · fail-429 · fail-500 · garbage · slow · stream-break · stream-error
 *   · drip (stream words 50 ms apart) · no-usage-long (LONG_WORDS and a LONG_TOOL call, never any usage)
 *   · cached (all but OPENAI_UNCACHED prompt tokens reported read from OpenAI's prompt cache, in
 *     usage.prompt_tokens_details.cached_tokens: part of prompt_tokens, as OpenAI counts it)
 *   · cache-writes (all but OPENAI_UNCACHED prompt tokens reported written to the cache, unasked, in
 *     prompt_tokens_details.cache_write_tokens, as OpenAI's GPT-6 family reports and bills them)
 *   · hang (stream three words, then silence until the client goes) · endless (stream words until the client goes)
 *   · greedy (bills the most a provider may: see greedyUsage)
 *   · tool-caller (with function tools and no tool result yet, calls the first or forced one: TOOL_CALL; else echo)
 * Usage is deterministic: prompt_tokens = 10 × messages + 1 + what the media parts cost, completion_tokens = words
 * of the reply. Media parts bill the way OpenAI bills them at most, whatever their bytes: an image_url part the
 * maximum of its detail for a GPT-4o-class model (IMAGE_TOKENS), an input_audio or file part MEDIA_TOKENS.
 */
import { STANDIN_KEY } from "./catalog.ts";

export const REPLY_WORDS = ["Hello", " from", " the", " stand", "-in"];

/** The no-usage-long answer: a paragraph of some 200 tokens, streamed word by word, then a tool call. */
export const LONG_WORDS = (
  "Token accounting has to hold when a provider says nothing about usage. The gateway then counts the prompt " +
  "and every generated piece itself, with the same byte pair encoding the provider's models use, so that the " +
  "charge lands within a hair of what the provider would have reported. Streams make this harder: the answer " +
  "arrives in fragments, words split across chunks, tool arguments arrive as partial JSON, and a client may " +
  "leave at any moment. Counting the concatenated text once, at the end, avoids the overcount that counting " +
  "every fragment on its own would give, because a fragment boundary inside a word costs an extra token. " +
  "Numbers like 3.14159, 2026-11-22 and 0x5f3759df, names like Zürich and Kraków, and emoji like 🚀 are " +
  "part of the test because they tokenize less evenly than plain English prose does."
).split(/(?= )/);
export const LONG_TOOL = {
  id: "call_standin_long",
  name: "record_measurement",
  arguments: ['{"station"', ': "Zürich-Fluntern", ', '"temperature_c": 7.4, ', '"humidity": 81, ', '"notes": "light rain after midnight"}'],
};

/** The "tool-caller" model's call: its id and arguments, whatever tool it calls. */
export const TOOL_CALL = { id: "call_standin_tool", arguments: ['{"city"', ': "Paris"}'] };

export interface Standin {
  url: string;
  port: number;
  requests: Record<string, unknown>[];
  /** What the "greedy" model billed for each of its requests, in order, whether its answer reported it or not. */
  billed: BilledUsage[];
  /** Streams the gateway stopped before their end (the client went away). */
  cancelled: number;
  /** Resolves once `n` streams have been stopped: the server learns of a closed connection a little later. */
  cancelledAtLeast(n: number): Promise<void>;
  /** Words the "endless" streams generated so far, read or not (a provider bills them). */
  generated: number;
  /** Resolves once `generated` reaches `n`. */
  generatedAtLeast(n: number): Promise<void>;
  /** Bytes the "flood" streams have sent so far (they send only as fast as the gateway reads). */
  flooded: number;
  stop(): void;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function errorBody(status: number, type: string) {
  return Response.json({ error: { message: `stand-in ${status}`, type, param: null, code: null } }, { status });
}

/** What an image costs at most on a GPT-4o-class model: 85 at low detail, 85 + 8 tiles × 170 at high (or auto). */
export const IMAGE_TOKENS = { low: 85, high: 1_445 };
/** What the stand-in bills an audio or file part (their size is not in the request's bytes either). */
export const MEDIA_TOKENS = 5_000;

/** Prompt tokens of a request's media parts, as the stand-in bills them. */
export function mediaTokensOf(messages: unknown[]): number {
  let tokens = 0;
  for (const m of messages as { content?: unknown }[]) {
    if (!Array.isArray(m?.content)) continue;
    for (const part of m.content as { type?: string; image_url?: { detail?: string } }[]) {
      if (part?.type === "image_url") tokens += part.image_url?.detail === "low" ? IMAGE_TOKENS.low : IMAGE_TOKENS.high;
      else if (part?.type === "input_audio" || part?.type === "file") tokens += MEDIA_TOKENS;
    }
  }
  return tokens;
}

/** The "cached" model's prompt tokens not read from its cache (the rest are). */
export const OPENAI_UNCACHED = 3;

/** What the stand-in bills an embeddings request: a token per 4 bytes of each input, rounded up. */
export function embeddingTokens(inputs: string[]): number {
  return inputs.reduce((n, s) => n + Math.ceil(Buffer.byteLength(s) / 4), 0);
}

/** The stand-in's embedding of an input: `dimensions` (default 4) floats that float32 holds exactly. */
export function standinEmbedding(input: string, dimensions = 4): number[] {
  return Array.from({ length: dimensions }, (_, d) => (Buffer.byteLength(input) % 64) / 8 + d * 0.25);
}

interface EmbeddingsBody {
  model: string;
  input: string | string[];
  encoding_format?: "float" | "base64";
  dimensions?: number;
}

/**
 * OpenAI's embeddings answer (float, or base64 of little-endian float32s). The model name picks the behaviour:
 * embed (default) · embed-no-usage · embed-fail-500 · embed-fail-400.
 */
function embeddingsAnswer(body: EmbeddingsBody): Response {
  if (body.model === "embed-fail-500") return errorBody(500, "server_error");
  if (body.model === "embed-fail-400") return errorBody(400, "invalid_request_error");
  const inputs = typeof body.input === "string" ? [body.input] : body.input;
  const data = inputs.map((s, index) => {
    const floats = standinEmbedding(s, body.dimensions);
    const embedding = body.encoding_format === "base64" ? Buffer.from(new Float32Array(floats).buffer).toString("base64") : floats;
    return { object: "embedding", index, embedding };
  });
  const tokens = embeddingTokens(inputs);
  const usage = body.model === "embed-no-usage" ? {} : { usage: { prompt_tokens: tokens, total_tokens: tokens } };
  return Response.json({ object: "list", data, model: body.model, ...usage });
}

export function usageFor(messages: number, mediaTokens = 0) {
  const prompt_tokens = 10 * messages + 1 + mediaTokens;
  const completion_tokens = REPLY_WORDS.length;
  return { prompt_tokens, completion_tokens, total_tokens: prompt_tokens + completion_tokens };
}

/** Usage as OpenAI reports it: reasoning (o-series) is billed as output, counted inside completion_tokens. */
export interface BilledUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  completion_tokens_details: { reasoning_tokens: number };
}

/**
 * What the "greedy" provider generates per choice when a request names no cap: a model's own maximum, far above
 * the test catalog's 4,096 output tokens, so a gateway that forgot to send its cap upstream is billed past its hold.
 */
export const GREEDY_DEFAULT_OUTPUT = 16_384;

/** The request fields the "greedy" provider bills by. */
type GreedyRequest = {
  n?: number;
  max_tokens?: number;
  max_completion_tokens?: number;
  reasoning_effort?: string;
};

/**
 * What the "greedy" provider bills, the most a provider is allowed to: every byte of the body it received as a
 * prompt token (no tokenizer makes a token of less than a byte), and for each of the `n` choices the whole cap —
 * the larger of max_tokens and max_completion_tokens when either is sent, else GREEDY_DEFAULT_OUTPUT — as if each
 * ran to its limit. With reasoning_effort, all of it but the visible reply is reasoning, inside completion_tokens.
 * Prompt tokens are billed once, whatever `n`, as OpenAI does.
 */
export function greedyUsage(body: GreedyRequest, bodyBytes: number): BilledUsage {
  const caps = [body.max_tokens, body.max_completion_tokens].filter((c): c is number => typeof c === "number");
  const perChoice = caps.length > 0 ? Math.max(...caps) : GREEDY_DEFAULT_OUTPUT;
  const choices = body.n ?? 1;
  const reasoning = body.reasoning_effort ? Math.max(0, perChoice - REPLY_WORDS.length) * choices : 0;
  const completion_tokens = perChoice * choices;
  return {
    prompt_tokens: bodyBytes,
    completion_tokens,
    total_tokens: bodyBytes + completion_tokens,
    completion_tokens_details: { reasoning_tokens: reasoning },
  };
}

/** Starts the stand-in on a free port; `delayMs` delays every answer (for benchmarks). */
export function startStandin(opts: { delayMs?: number; record?: boolean } = {}): Standin {
  const requests: Record<string, unknown>[] = [];
  const billed: BilledUsage[] = [];
  const state = { cancelled: 0, waiters: [] as { n: number; resolve: () => void }[] };
  const generated = { words: 0, waiters: [] as { n: number; resolve: () => void }[] };
  const flood = { bytes: 0 };
  const cancelled = () => {
    state.cancelled++;
    state.waiters = state.waiters.filter((w) => (w.n <= state.cancelled ? (w.resolve(), false) : true));
  };
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    idleTimeout: 0,
    // A stream the stand-in breaks on purpose ("stream-break") is not an error to print with a code frame.
    development: false,
    async fetch(req) {
      const url = new URL(req.url);
      if (req.method === "POST" && url.pathname === "/v1/embeddings") {
        if (req.headers.get("authorization") !== `Bearer ${STANDIN_KEY}`) return errorBody(401, "invalid_api_key");
        const body = (await req.json()) as EmbeddingsBody;
        if (opts.record !== false) requests.push(body as unknown as Record<string, unknown>);
        return embeddingsAnswer(body);
      }
      if (req.method !== "POST" || url.pathname !== "/v1/chat/completions") return errorBody(404, "not_found");
      const auth = req.headers.get("authorization");
      // As OpenAI does, the refusal names the key it was given (the gateway must keep it out of its log).
      if (auth !== `Bearer ${STANDIN_KEY}`)
        return Response.json(
          {
            error: {
              message: `Incorrect API key provided: ${auth?.slice(7)}.`,
              type: "invalid_request_error",
              param: null,
              code: "invalid_api_key",
            },
          },
          { status: 401 },
        );
      const raw = await req.text();
      const body = JSON.parse(raw) as GreedyRequest & {
        model: string;
        messages: unknown[];
        tools?: ChatTool[];
        tool_choice?: unknown;
        stream?: boolean;
        stream_options?: { include_usage?: boolean };
      };
      if (opts.record !== false) requests.push(body);
      if (opts.delayMs) await sleep(opts.delayMs);
      const mode = body.model;
      if (mode === "fail-400") return errorBody(400, "invalid_request_error");
      if (mode === "fail-429") return errorBody(429, "rate_limit_exceeded");
      if (mode === "fail-500") return errorBody(500, "server_error");
      if (mode === "garbage") return new Response("<html>bad gateway</html>", { headers: { "content-type": "text/html" } });
      if (mode === "slow") {
        await sleep(2_000);
      }
      const usage: ReturnType<typeof usageFor> & { prompt_tokens_details?: { cached_tokens: number; cache_write_tokens?: number } } =
        usageFor(body.messages.length, mediaTokensOf(body.messages));
      if (mode === "cached") usage.prompt_tokens_details = { cached_tokens: usage.prompt_tokens - OPENAI_UNCACHED };
      if (mode === "cache-writes")
        usage.prompt_tokens_details = { cached_tokens: 0, cache_write_tokens: usage.prompt_tokens - OPENAI_UNCACHED };
      const base = { id: "chatcmpl-standin", created: Math.floor(Date.now() / 1000), model: mode, system_fingerprint: "fp_standin" };
      if (mode === "no-usage-long") return longAnswer(base, body.stream === true);
      if (mode === "flood" && body.stream) return floodAnswer(base, flood, cancelled);
      if (mode === "greedy") {
        const bill = greedyUsage(body, Buffer.byteLength(raw));
        billed.push(bill);
        return greedyAnswer(base, body, bill);
      }
      if (mode === "tool-caller") {
        const tool = toolToCall(body);
        if (tool) return toolCallAnswer(base, tool, usage, body.stream === true, body.stream_options?.include_usage === true);
      }
      if (!body.stream) {
        return Response.json({
          ...base,
          object: "chat.completion",
          choices: [
            {
              index: 0,
              message: { role: "assistant", content: REPLY_WORDS.join(""), refusal: null },
              logprobs: null,
              finish_reason: "stop",
            },
          ],
          ...(mode === "no-usage" ? {} : { usage }),
        });
      }
      const includeUsage = body.stream_options?.include_usage === true && mode !== "no-usage";
      const chunk = (delta: object, finish: string | null = null) =>
        `data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...(includeUsage ? { usage: null } : {}) })}\n\n`;
      const enc = new TextEncoder();
      let stopped = false;
      const stream = new ReadableStream<Uint8Array>({
        async start(ctrl) {
          ctrl.enqueue(enc.encode(chunk({ role: "assistant", content: "" })));
          for (const [i, w] of REPLY_WORDS.entries()) {
            if (mode === "stream-break" && i === 2) {
              await sleep(20); // let the first chunks leave before the connection breaks
              return ctrl.error(new Error("connection reset"));
            }
            if (mode === "stream-error" && i === 2) {
              ctrl.enqueue(enc.encode(`data: ${JSON.stringify({ error: { message: "overloaded", type: "server_error" } })}\n\n`));
              return ctrl.close();
            }
            if (mode === "drip" && i > 0) await sleep(50);
            if (mode === "hang" && i === 3) return; // silence: the stream stays open until cancelled
            ctrl.enqueue(enc.encode(chunk({ content: w })));
          }
          // A word every few ms for as long as the gateway reads (its reads stop when its client stops reading).
          while (mode === "endless") {
            await sleep(2);
            if (stopped) return;
            ctrl.enqueue(enc.encode(chunk({ content: " more" })));
            generated.words++;
            generated.waiters = generated.waiters.filter((w) => (w.n <= generated.words ? (w.resolve(), false) : true));
          }
          ctrl.enqueue(enc.encode(chunk({}, "stop")));
          if (includeUsage)
            ctrl.enqueue(enc.encode(`data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [], usage })}\n\n`));
          ctrl.enqueue(enc.encode("data: [DONE]\n\n"));
          ctrl.close();
        },
        cancel() {
          stopped = true;
          cancelled();
        },
      });
      return new Response(stream, { headers: { "content-type": "text/event-stream" } });
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}/v1`,
    port: server.port!,
    requests,
    billed,
    get cancelled() {
      return state.cancelled;
    },
    cancelledAtLeast: (n) => new Promise<void>((resolve) => (state.cancelled >= n ? resolve() : state.waiters.push({ n, resolve }))),
    get generated() {
      return generated.words;
    },
    get flooded() {
      return flood.bytes;
    },
    generatedAtLeast: (n) => new Promise<void>((resolve) => (generated.words >= n ? resolve() : generated.waiters.push({ n, resolve }))),
    stop: () => server.stop(true),
  };
}

type ChatTool = { type?: string; function?: { name?: string } };

/**
 * The tool the "tool-caller" model calls: the forced one, else the first function tool, while the conversation's
 * last message is not a tool result (an agent's loop: call, result, answer); none without function tools.
 */
function toolToCall(body: { messages: unknown[]; tools?: ChatTool[]; tool_choice?: unknown }): string | undefined {
  const last = body.messages.at(-1) as { role?: string } | undefined;
  if (last?.role === "tool" || !Array.isArray(body.tools) || body.tool_choice === "none") return undefined;
  const forced = (body.tool_choice as { function?: { name?: string } } | undefined)?.function?.name;
  return forced ?? body.tools.find((t) => t?.type === "function" && typeof t.function?.name === "string")?.function?.name;
}

// The "tool-caller" model's call of `name` (TOOL_CALL), finish_reason tool_calls, billed like any answer.
function toolCallAnswer(base: Record<string, unknown>, name: string, usage: object, stream: boolean, includeUsage: boolean): Response {
  const call = { id: TOOL_CALL.id, type: "function", function: { name, arguments: TOOL_CALL.arguments.join("") } };
  if (!stream) {
    return Response.json({
      ...base,
      object: "chat.completion",
      choices: [
        {
          index: 0,
          message: { role: "assistant", content: null, tool_calls: [call], refusal: null },
          logprobs: null,
          finish_reason: "tool_calls",
        },
      ],
      usage,
    });
  }
  const chunk = (delta: object, finish: string | null = null) =>
    `data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;
  let body = chunk({ role: "assistant", content: null });
  body += chunk({ tool_calls: [{ index: 0, id: TOOL_CALL.id, type: "function", function: { name, arguments: "" } }] });
  for (const a of TOOL_CALL.arguments) body += chunk({ tool_calls: [{ index: 0, function: { arguments: a } }] });
  body += chunk({}, "tool_calls");
  if (includeUsage) body += `data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [], usage })}\n\n`;
  body += "data: [DONE]\n\n";
  return new Response(body, { headers: { "content-type": "text/event-stream" } });
}

// ~4 KB of text a chunk, never ending, produced only when pulled: an upstream exactly as fast as the gateway reads
// it, so that what the gateway pulls from a client that does not read shows in `flooded`.
function floodAnswer(base: Record<string, unknown>, flood: { bytes: number }, cancelled: () => void): Response {
  const enc = new TextEncoder();
  const chunk = enc.encode(
    `data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [{ index: 0, delta: { content: " more".repeat(800) }, finish_reason: null }] })}\n\n`,
  );
  const stream = new ReadableStream<Uint8Array>(
    {
      pull(ctrl) {
        flood.bytes += chunk.byteLength;
        ctrl.enqueue(chunk);
      },
      cancel: cancelled,
    },
    { highWaterMark: 0 },
  );
  return new Response(stream, { headers: { "content-type": "text/event-stream" } });
}

// A provider that reports no usage at all: the text word by word, then a tool call whose arguments arrive in
// pieces, finish_reason tool_calls; no usage in the JSON body nor in any chunk.
function longAnswer(base: Record<string, unknown>, stream: boolean): Response {
  const call = { id: LONG_TOOL.id, type: "function", function: { name: LONG_TOOL.name, arguments: LONG_TOOL.arguments.join("") } };
  if (!stream) {
    return Response.json({
      ...base,
      object: "chat.completion",
      choices: [
        {
          index: 0,
          message: { role: "assistant", content: LONG_WORDS.join(""), tool_calls: [call], refusal: null },
          logprobs: null,
          finish_reason: "tool_calls",
        },
      ],
    });
  }
  const chunk = (delta: object, finish: string | null = null) =>
    `data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;
  let body = chunk({ role: "assistant", content: "" });
  for (const w of LONG_WORDS) body += chunk({ content: w });
  body += chunk({ tool_calls: [{ index: 0, id: LONG_TOOL.id, type: "function", function: { name: LONG_TOOL.name, arguments: "" } }] });
  for (const a of LONG_TOOL.arguments) body += chunk({ tool_calls: [{ index: 0, function: { arguments: a } }] });
  body += chunk({}, "tool_calls") + "data: [DONE]\n\n";
  return new Response(body, { headers: { "content-type": "text/event-stream" } });
}

// The "greedy" provider: each of the n choices says the short reply and stops at its cap (finish_reason "length":
// the rest of what it billed was reasoning, or output the stand-in spares the test from reading). A stream has
// usage in its last chunk only when include_usage asks for it, as OpenAI sends it; it is billed all the same.
function greedyAnswer(
  base: Record<string, unknown>,
  body: GreedyRequest & { stream?: boolean; stream_options?: { include_usage?: boolean } },
  usage: BilledUsage,
): Response {
  const choices = Array.from({ length: body.n ?? 1 }, (_, index) => index);
  if (!body.stream) {
    return Response.json({
      ...base,
      object: "chat.completion",
      choices: choices.map((index) => ({
        index,
        message: { role: "assistant", content: REPLY_WORDS.join(""), refusal: null },
        logprobs: null,
        finish_reason: "length",
      })),
      usage,
    });
  }
  const includeUsage = body.stream_options?.include_usage === true;
  const chunk = (index: number, delta: object, finish: string | null = null) =>
    `data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [{ index, delta, logprobs: null, finish_reason: finish }], ...(includeUsage ? { usage: null } : {}) })}\n\n`;
  let text = "";
  for (const i of choices) text += chunk(i, { role: "assistant", content: "" });
  for (const w of REPLY_WORDS) for (const i of choices) text += chunk(i, { content: w });
  for (const i of choices) text += chunk(i, {}, "length");
  if (includeUsage) text += `data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [], usage })}\n\n`;
  text += "data: [DONE]\n\n";
  return new Response(text, { headers: { "content-type": "text/event-stream" } });
}
