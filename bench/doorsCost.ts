/**
 * The front doors' own work, in process: CPU µs per answer of the door's translation on top of what chat does for
 * the same answer (the bench's short answer: 8 events in one read; and 200 reads of one event). Streams: the
 * metered chat stream alone, then the same read through the Responses and the Messages door. JSON: the chat
 * answer's text reshaped by each door. No HTTP, no Redis (settles and the store's write go nowhere).
 *   bun bench/doorsCost.ts [tree]    # tree: a checkout to measure (default this one), for A/B against main
 */
const tree = process.argv[2] ?? new URL("..", import.meta.url).pathname.replace(/\/$/, "");
const { MeteredStream } = await import(`${tree}/src/modules/chat/meteredStream.ts`);
const { IdleDeadline } = await import(`${tree}/src/modules/chat/idleDeadline.ts`);
const { openaiAdapter } = await import(`${tree}/src/providers/openai/adapter.ts`);
const { responsesStream } = await import(`${tree}/src/providers/responses/stream.ts`);
const { responseObject } = await import(`${tree}/src/providers/responses/answer.ts`);
const wire = await import(`${tree}/src/providers/responses/wire.ts`);
const { responseFrame, newId } = wire;
// Since the doors run inside the metered stream (DoorStream), a door is an option of MeteredStream, not a stream.
const inside = responsesStream.length === 2;
// Since the frame is written as text, responseFrame gives the function frameJson made of its object before.
const frameOf = () => {
  const frame = responseFrame(newId("resp"), request);
  return inside && typeof frame !== "function" ? wire.frameJson(frame) : frame;
};
const jsonAnswer = (r: { json?: string; body?: unknown }) => r.json ?? JSON.stringify(r.body);
const { messagesStream } = await import(`${tree}/src/providers/anthropic/messagesStream.ts`);
const { messageOf } = await import(`${tree}/src/providers/anthropic/messagesAnswer.ts`);

const enc = new TextEncoder();
const base = { id: "chatcmpl-standin", created: 1763920000, model: "echo", system_fingerprint: "fp_standin" };
const chunk = (delta: object, finish: string | null = null) =>
  `data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], usage: null })}\n\n`;
const words = (n: number) => Array.from({ length: n }, (_, i) => chunk({ content: ` w${i}` }));
const tail = `data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [], usage: { prompt_tokens: 11, completion_tokens: 5, total_tokens: 16 } })}\n\ndata: [DONE]\n\n`;
const shapes: Record<string, Uint8Array[]> = {
  "8 events in one read": [enc.encode(chunk({ role: "assistant", content: "" }) + words(5).join("") + chunk({}, "stop") + tail)],
  "200 reads of one event": [chunk({ role: "assistant", content: "" }), ...words(198), chunk({}, "stop") + tail].map((s) => enc.encode(s)),
};
const chatJson = JSON.stringify({
  ...base,
  model: "standin0/echo",
  object: "chat.completion",
  choices: [
    { index: 0, message: { role: "assistant", content: "Hello from the stand-in", refusal: null }, logprobs: null, finish_reason: "stop" },
  ],
  usage: { prompt_tokens: 11, completion_tokens: 5, total_tokens: 16 },
});
const request = {
  model: "standin0/echo",
  input: [{ role: "user", content: "Say hello to the benchmark." }],
  max_output_tokens: 16,
  store: true,
};
const settler = { settleBehind() {}, release: async () => {} };
const ledger = { extendHold: async () => {}, holdRefreshMs: 60_000 };
const call = {
  principal: {},
  holdId: "h",
  model: { id: "standin0/echo" },
  adapter: openaiAdapter,
  body: { messages: [] },
  bound: { promptTokens: 100, completionTokens: 16 },
  headers: {},
  trace: {},
};
const noop = () => Promise.resolve();

/** The metered stream's body: since issue 31 from `open()` (a stream, or the whole answer's bytes), before it `body`. */
type Body = ReadableStream<Uint8Array> | Uint8Array;

function chatStream(parts: Uint8Array[], door?: unknown): ReadableStream<Uint8Array> & Promise<Body> {
  let i = 0;
  const upstream = new ReadableStream<Uint8Array>({
    pull(c) {
      if (i < parts.length) c.enqueue(parts[i++]!);
      else c.close();
    },
  });
  const m = new MeteredStream(call, upstream, {
    holds: settler,
    ledger,
    deadline: new IdleDeadline(60_000),
    includeUsage: true,
    maxStreamMs: 7_200_000,
    door,
  });
  return m.open ? m.open() : m.body;
}

async function drain(body: Body | Promise<Body>): Promise<void> {
  const s = await body;
  if (!(s instanceof ReadableStream)) return;
  const r = s.getReader();
  for (;;) if ((await r.read()).done) break;
}

const doors: Record<string, (parts: Uint8Array[]) => Promise<void>> = {
  chat: (p) => drain(chatStream(p)),
  responses: (p) => drain(inside ? chatStream(p, responsesStream(frameOf(), noop)) : responsesStream(chatStream(p), frameOf(), noop)),
  messages: (p) => drain(inside ? chatStream(p, messagesStream("standin0/echo")) : messagesStream(chatStream(p), "standin0/echo")),
};
const json: Record<string, () => void> = {
  chat: () => {},
  responses: () => jsonAnswer(responseObject(responseFrame(newId("resp"), request), chatJson)),
  messages: () => messageOf(chatJson),
};

const median = async (n: number, run: () => unknown): Promise<number> => {
  for (let i = 0; i < n / 10; i++) await run();
  const best: number[] = [];
  for (let rep = 0; rep < 5; rep++) {
    const c0 = process.cpuUsage();
    for (let i = 0; i < n; i++) await run();
    const c = process.cpuUsage(c0);
    best.push((c.user + c.system) / n);
  }
  return best.sort((a, b) => a - b)[2]!;
};
const label = tree.split("/").pop()!.padEnd(12);
for (const [name, parts] of Object.entries(shapes)) {
  const n = name.startsWith("8") ? 20_000 : 500;
  for (const [door, run] of Object.entries(doors)) {
    console.log(`${label} stream ${name.padEnd(24)} ${door.padEnd(10)} CPU µs/stream ${(await median(n, () => run(parts))).toFixed(1)}`);
  }
}
for (const [door, run] of Object.entries(json)) {
  console.log(`${label} json ${door.padEnd(10)} CPU µs/answer ${(await median(50_000, run)).toFixed(2)}`);
}
process.exit(0);
