/**
 * The metered stream alone, in process: CPU µs per stream for the bench's short answer (8 events arriving in one
 * read) and longer ones (200 and 1000 reads of one event each), consumed by a plain reader. Settles go nowhere
 * (a stub), so this is the stream's own work: SSE decoding, translation, timers, enqueueing; no HTTP, no Redis.
 *   bun bench/streamCost.ts [tree]    # tree: a checkout to measure (default this one), for A/B against main
 */
const tree = process.argv[2] ?? new URL("..", import.meta.url).pathname.replace(/\/$/, "");
const { MeteredStream } = await import(`${tree}/src/modules/chat/meteredStream.ts`);
let IdleDeadline: any;
// Before idleDeadline.ts, IdleDeadline lived in meteredStream.ts.
try {
  IdleDeadline = (await import(`${tree}/src/modules/chat/idleDeadline.ts`)).IdleDeadline;
} catch {
  IdleDeadline = (await import(`${tree}/src/modules/chat/meteredStream.ts`)).IdleDeadline;
}
const { openaiAdapter } = await import(`${tree}/src/providers/openai/adapter.ts`);
const enc = new TextEncoder();
const base = { id: "chatcmpl-standin", created: 1763920000, model: "echo", system_fingerprint: "fp_standin" };
const chunk = (delta: object, finish: string | null = null) =>
  `data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], usage: null })}\n\n`;
const words = (n: number) => Array.from({ length: n }, (_, i) => chunk({ content: ` w${i}` }));
const tail = `data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [], usage: { prompt_tokens: 11, completion_tokens: 5, total_tokens: 16 } })}\n\ndata: [DONE]\n\n`;
const shapes: Record<string, Uint8Array[]> = {
  "8 events in one read": [enc.encode(chunk({ role: "assistant", content: "" }) + words(5).join("") + chunk({}, "stop") + tail)],
  "200 reads of one event": [chunk({ role: "assistant", content: "" }), ...words(198), chunk({}, "stop") + tail].map((s) => enc.encode(s)),
  // Past the translator's unread limit (64 KiB): most of its output is parsed on the way, as before.
  "1000 reads of one event": [chunk({ role: "assistant", content: "" }), ...words(998), chunk({}, "stop") + tail].map((s) => enc.encode(s)),
};
const settler = { settleBehind() {}, release: async () => {} };
const ledger = { extendHold: async () => {}, holdRefreshMs: 60_000 };
const call = {
  principal: {},
  holdId: "h",
  model: { id: "standin0/echo", promptPico: 2_500_000, completionPico: 10_000_000 },
  asked: "standin0/echo",
  adapter: openaiAdapter,
  body: { messages: [] },
  bound: { promptTokens: 100, completionTokens: 16 },
  headers: {},
  trace: {},
};
async function one(parts: Uint8Array[]) {
  let i = 0;
  const upstream = new ReadableStream<Uint8Array>({
    pull(c) {
      if (i < parts.length) c.enqueue(parts[i++]!);
      else c.close();
    },
  });
  const m = new MeteredStream(call, upstream, {
    holds: settler,
    settler,
    ledger,
    deadline: new IdleDeadline(60_000),
    includeUsage: true,
    maxStreamMs: 7_200_000,
  });
  // Since issue 31 the body comes from open(): a stream, or the whole answer's bytes when it ended in the first read.
  const body = m.open ? await m.open() : m.body;
  if (body instanceof ReadableStream) {
    const r = body.getReader();
    for (;;) if ((await r.read()).done) break;
  }
  await m.ended;
}
for (const [name, parts] of Object.entries(shapes)) {
  const n = name.startsWith("8") ? 20_000 : name.startsWith("200") ? 500 : 100;
  for (let i = 0; i < n / 10; i++) await one(parts);
  const best: number[] = [];
  for (let rep = 0; rep < 5; rep++) {
    const c0 = process.cpuUsage();
    for (let i = 0; i < n; i++) await one(parts);
    const c = process.cpuUsage(c0);
    best.push((c.user + c.system) / n);
  }
  best.sort((a, b) => a - b);
  console.log(
    `${tree.split("/").pop()!.padEnd(12)} ${name.padEnd(24)} CPU µs/stream median ${best[2]!.toFixed(1)} min ${best[0]!.toFixed(1)}`,
  );
}
process.exit(0);
