/**
 * The baseline: the thinnest reasonable Bun pass-through proxy. POST /v1/chat/completions is forwarded to the
 * stand-in with fetch (same body and Authorization in, same status and body out), nothing else. A streamed answer
 * (text/event-stream) is passed through as it arrives, the way any streaming proxy must.
 * Usage: bun bench/baseline-proxy.ts <upstream base, e.g. http://127.0.0.1:1234/v1> [port]   → prints "READY <port>".
 * With a port, it shares it (reusePort) with other proxies started on the same one: N processes on one port, the
 * baseline of a gateway run with WORKERS=N.
 */
export {}; // a module, not a global script

const upstream = process.argv[2];
if (!upstream || !/^http:\/\/127\.0\.0\.1:\d+\//.test(upstream)) {
  console.error("usage: bun bench/baseline-proxy.ts http://127.0.0.1:<port>/v1");
  process.exit(2);
}
const target = `${upstream.replace(/\/$/, "")}/chat/completions`;

const port = Number(process.argv[3] ?? 0);
const server = Bun.serve({
  port,
  reusePort: port !== 0,
  hostname: "127.0.0.1",
  idleTimeout: 0,
  async fetch(req) {
    if (req.method !== "POST" || new URL(req.url).pathname !== "/v1/chat/completions") return new Response("not found", { status: 404 });
    const res = await fetch(target, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: req.headers.get("authorization") ?? "" },
      body: await req.text(),
    });
    const type = res.headers.get("content-type") ?? "application/json";
    if (type.startsWith("text/event-stream"))
      return new Response(res.body, { status: res.status, headers: { "content-type": type, "cache-control": "no-cache" } });
    const body = await res.text();
    return new Response(body, { status: res.status, headers: { "content-type": type } });
  },
});
console.log(`READY ${server.port}`);

const stop = () => {
  void server.stop(true);
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
