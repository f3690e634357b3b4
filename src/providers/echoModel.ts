/**
 * A tiny keyless model server speaking OpenAI's chat-completions wire format (JSON and SSE with the usage chunk):
 * it answers with the last user message. `serve` runs one in-process as the local test model when no provider is
 * configured (localModel.ts); scripts/echo-model.ts runs one alone for config/models.local.json's "echo" provider.
 */

/** Words are tokens here: good enough to see usage and charges move, and deterministic. */
const tokens = (s: string) => s.split(/\s+/).filter(Boolean).length;

function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p: { text?: unknown }) => (typeof p?.text === "string" ? p.text : "")).join("");
  return "";
}

type Body = {
  model?: string;
  messages?: { role?: string; content?: unknown }[];
  stream?: boolean;
  stream_options?: { include_usage?: boolean };
};

function answer(body: Body): Response {
  const messages = Array.isArray(body.messages) ? body.messages : [];
  const lastUser = [...messages].reverse().find((m) => m?.role === "user");
  const reply = `echo: ${textOf(lastUser?.content) || "(nothing to echo)"}`;
  const usage = {
    prompt_tokens: messages.reduce((n, m) => n + tokens(textOf(m?.content)) + 3, 0),
    completion_tokens: tokens(reply),
    total_tokens: 0,
  };
  usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
  const base = { id: `chatcmpl-echo-${crypto.randomUUID()}`, created: Math.floor(Date.now() / 1000), model: body.model ?? "echo" };
  if (!body.stream) {
    return Response.json({
      ...base,
      object: "chat.completion",
      choices: [{ index: 0, message: { role: "assistant", content: reply }, finish_reason: "stop" }],
      usage,
    });
  }
  const chunk = (delta: Record<string, unknown>, finish: string | null) =>
    `data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  const parts = [chunk({ role: "assistant", content: "" }, null)];
  for (const word of reply.split(/(?= )/)) parts.push(chunk({ content: word }, null));
  parts.push(chunk({}, "stop"));
  if (body.stream_options?.include_usage)
    parts.push(`data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [], usage })}\n\n`);
  parts.push("data: [DONE]\n\n");
  return new Response(parts.join(""), { headers: { "content-type": "text/event-stream" } });
}

/**
 * Starts the echo model server; port 0 picks a free port (tests). `record: false` keeps no list of the requests
 * (the gateway's in-process one, which may run for days).
 */
export function startEchoModel(opts: { port?: number; hostname?: string; record?: boolean } = {}) {
  const requests: { authorization: string | null; body: Body }[] = [];
  const server = Bun.serve({
    port: opts.port ?? 8081,
    hostname: opts.hostname ?? "127.0.0.1",
    async fetch(req) {
      const { pathname } = new URL(req.url);
      if (req.method === "GET" && pathname === "/v1/models") {
        return Response.json({ object: "list", data: [{ id: "echo", object: "model", owned_by: "echo-model" }] });
      }
      if (req.method !== "POST" || pathname !== "/v1/chat/completions") {
        return Response.json({ error: { message: "not found", type: "not_found" } }, { status: 404 });
      }
      let body: Body;
      try {
        body = (await req.json()) as Body;
      } catch {
        return Response.json({ error: { message: "body is not JSON", type: "invalid_request_error" } }, { status: 400 });
      }
      if (opts.record !== false) requests.push({ authorization: req.headers.get("authorization"), body });
      return answer(body);
    },
  });
  return { url: `http://${server.hostname}:${server.port}/v1`, requests, stop: () => server.stop(true) };
}
