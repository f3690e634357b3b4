/**
 * A local model provider speaking OpenAI's chat-completions wire format (JSON, SSE with the usage chunk, error
 * bodies). The upstream model name picks the behaviour, so tests need no shared mutable state:
 *   echo (default) · no-usage · fail-400 · fail-429 · fail-500 · garbage · slow · stream-break · stream-error
 *   · drip (stream words 50 ms apart)
 * Usage is deterministic: prompt_tokens = 10 × messages + 1, completion_tokens = words of the reply.
 */
export const REPLY_WORDS = ["Hello", " from", " the", " stand", "-in"];

export interface Standin {
  url: string;
  port: number;
  requests: Record<string, unknown>[];
  stop(): void;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function errorBody(status: number, type: string) {
  return Response.json({ error: { message: `stand-in ${status}`, type, param: null, code: null } }, { status });
}

export function usageFor(messages: number) {
  const prompt_tokens = 10 * messages + 1;
  const completion_tokens = REPLY_WORDS.length;
  return { prompt_tokens, completion_tokens, total_tokens: prompt_tokens + completion_tokens };
}

/** Starts the stand-in on a free port; `delayMs` delays every answer (for benchmarks). */
export function startStandin(opts: { delayMs?: number; record?: boolean } = {}): Standin {
  const requests: Record<string, unknown>[] = [];
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    idleTimeout: 0,
    async fetch(req) {
      const url = new URL(req.url);
      if (req.method !== "POST" || url.pathname !== "/v1/chat/completions") return errorBody(404, "not_found");
      if (req.headers.get("authorization") !== "Bearer standin-key") return errorBody(401, "invalid_api_key");
      const body = (await req.json()) as { model: string; messages: unknown[]; stream?: boolean; stream_options?: { include_usage?: boolean } };
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
      const usage = usageFor(body.messages.length);
      const base = { id: "chatcmpl-standin", created: Math.floor(Date.now() / 1000), model: mode, system_fingerprint: "fp_standin" };
      if (!body.stream) {
        return Response.json({
          ...base,
          object: "chat.completion",
          choices: [{ index: 0, message: { role: "assistant", content: REPLY_WORDS.join(""), refusal: null }, logprobs: null, finish_reason: "stop" }],
          ...(mode === "no-usage" ? {} : { usage }),
        });
      }
      const includeUsage = body.stream_options?.include_usage === true && mode !== "no-usage";
      const chunk = (delta: object, finish: string | null = null) =>
        `data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...(includeUsage ? { usage: null } : {}) })}\n\n`;
      const enc = new TextEncoder();
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
            ctrl.enqueue(enc.encode(chunk({ content: w })));
          }
          ctrl.enqueue(enc.encode(chunk({}, "stop")));
          if (includeUsage) ctrl.enqueue(enc.encode(`data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [], usage })}\n\n`));
          ctrl.enqueue(enc.encode("data: [DONE]\n\n"));
          ctrl.close();
        },
      });
      return new Response(stream, { headers: { "content-type": "text/event-stream" } });
    },
  });
  return { url: `http://127.0.0.1:${server.port}/v1`, port: server.port!, requests, stop: () => server.stop(true) };
}
