/**
 * POST /v1/messages ahead of Elysia (app.ts's lean doors, issue 31): a request with a declared Content-Length (what
 * every HTTP client sends) is served by the door; one without (a chunked body) still by the Elysia route. Both
 * answer alike: the same status, Anthropic's error shape with the same type and message, the same Messages answer
 * and charge, the request id and CORS headers on each.
 */
import { describe, expect, test } from "bun:test";
import { BASE, sharedGateway } from "./helpers/gateway.ts";

const gw = sharedGateway({ CORS_ORIGINS: "https://app.example" });

const messages = [{ role: "user", content: "hi" }];

/** The same request twice: through the door (Content-Length declared) and through the Elysia route (none). */
async function both(body: unknown, headers: Record<string, string>) {
  const text = JSON.stringify(body);
  const send = async (declared: boolean) => {
    const h: Record<string, string> = { "content-type": "application/json", origin: "https://app.example", ...headers };
    if (declared) h["content-length"] = String(Buffer.byteLength(text));
    const res = await gw.handle(new Request(`${BASE}/v1/messages`, { method: "POST", headers: h, body: text }));
    return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, any> };
  };
  return { door: await send(true), route: await send(false) };
}

describe("/v1/messages through its lean door", () => {
  test("JSON answers, translated and native: the same Messages answer and usage as the route's", async () => {
    const { key } = await gw.newWallet(1);
    for (const model of ["standin/echo", "claude/claude-sonnet-4-5"]) {
      const { door, route } = await both({ model, max_tokens: 64, messages }, { "x-api-key": key });
      expect(door.status).toBe(200);
      expect(route.status).toBe(200);
      expect(door.body.type).toBe("message");
      expect(door.body.model).toBe(route.body.model);
      expect(door.body.content).toEqual(route.body.content);
      expect(door.body.usage).toEqual(route.body.usage);
      for (const r of [door, route]) {
        expect(r.headers.get("x-request-id")).toBeTruthy();
        expect(r.headers.get("access-control-allow-origin")).toBe("https://app.example");
      }
    }
  });

  test("errors keep Anthropic's shape, status, type and message: 401, 400 unknown model, 402, 400 not a request", async () => {
    const { key: poor } = await gw.newWallet(0);
    const { key } = await gw.newWallet(1);
    const cases: [unknown, Record<string, string>, number, string][] = [
      [{ model: "standin/echo", max_tokens: 64, messages }, {}, 401, "authentication_error"],
      [{ model: "standin/echo", max_tokens: 64, messages }, { "x-api-key": "sk-" + "0".repeat(64) }, 401, "authentication_error"],
      [{ model: "nope/nothing", max_tokens: 64, messages }, { "x-api-key": key }, 400, "invalid_request_error"],
      [{ model: "standin/echo", max_tokens: 64, messages }, { "x-api-key": poor }, 402, "billing_error"],
      [{ model: "standin/echo", max_tokens: 64 }, { "x-api-key": key }, 400, "invalid_request_error"],
      [[1, 2], { "x-api-key": key }, 400, "invalid_request_error"],
    ];
    for (const [body, headers, status, type] of cases) {
      const { door, route } = await both(body, headers);
      expect({ status: door.status, type: door.body.type, error: door.body.error }).toEqual({
        status,
        type: "error",
        error: { type, message: route.body.error.message },
      });
      expect(route.status).toBe(status);
      expect(route.body.error.type).toBe(type);
      expect(door.headers.get("x-request-id")).toBeTruthy();
      expect(door.headers.get("access-control-allow-origin")).toBe("https://app.example");
    }
  });
});
