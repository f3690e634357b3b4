/**
 * /health and /metrics while Redis hangs: the real redis-server is stopped (SIGSTOP) and resumed (SIGCONT), so
 * every probe meets a Redis that accepts nothing, as a hung or partitioned one does.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { BASE, startGateway, type TestGateway } from "./helpers/gateway.ts";

let gw: TestGateway;
let pid: number;
beforeAll(async () => {
  gw = await startGateway();
  const info = await gw.services.redis.info("server");
  pid = Number(/process_id:(\d+)/.exec(info)![1]);
}, 60_000);
afterAll(async () => {
  process.kill(pid, "SIGCONT");
  await gw?.close();
});

test("a hanging Redis: /health 503 degraded with redis down, /metrics gateway_redis_up 0; back to ok once it answers", async () => {
  process.kill(pid, "SIGSTOP");
  try {
    expect(await gw.call("GET", "/health")).toMatchObject({ status: 503, body: { status: "degraded", redis: "down", postgres: "up" } });
    const metrics = await (await gw.handle(new Request(`${BASE}/metrics`))).text();
    expect(metrics).toContain("\ngateway_redis_up 0\n");
    expect(metrics).toContain("\ngateway_postgres_up 1\n");
  } finally {
    process.kill(pid, "SIGCONT");
  }
  expect(await gw.call("GET", "/health")).toMatchObject({ status: 200, body: { status: "ok", redis: "up", postgres: "up" } });
  expect(await (await gw.handle(new Request(`${BASE}/metrics`))).text()).toContain("\ngateway_redis_up 1\n");
}, 20_000);
