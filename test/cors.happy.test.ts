/** CORS: browsers on other origins can preflight, call, and read the payment and rate-limit headers. */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { loadConfig } from "../src/config.ts";
import { BASE, startGateway, type TestGateway } from "./helpers/gateway.ts";

let open: TestGateway;
let listed: TestGateway;
beforeAll(async () => {
  open = await startGateway();
  listed = await startGateway({ CORS_ORIGINS: "https://app.example, http://localhost:3000" });
}, 90_000);
afterAll(async () => {
  await open?.close();
  await listed?.close();
});

const DAPP = "https://dapp.example";

function preflight(g: TestGateway, path: string, origin: string, method = "POST") {
  return g.handle(
    new Request(BASE + path, {
      method: "OPTIONS",
      headers: { origin, "access-control-request-method": method, "access-control-request-headers": "authorization, content-type" },
    }),
  );
}

const list = (h: string | null) => (h ?? "").split(",").map((s) => s.trim().toLowerCase());

describe("CORS_ORIGINS unset (any origin)", () => {
  test("a preflight from another origin is 204 with the methods and headers a client needs", async () => {
    for (const [path, method] of [
      ["/v1/chat/completions", "POST"],
      ["/v1/auth/keys/12", "DELETE"],
      ["/v1/topup", "POST"],
    ] as const) {
      const res = await preflight(open, path, DAPP, method);
      expect(res.status).toBe(204);
      expect(res.headers.get("access-control-allow-origin")).toBe("*");
      expect(list(res.headers.get("access-control-allow-methods"))).toEqual(expect.arrayContaining(["get", "post", "delete"]));
      expect(list(res.headers.get("access-control-allow-headers"))).toEqual(
        expect.arrayContaining(["authorization", "content-type", "x-payment", "payment-signature", "sign-in-with-x", "x-api-key", "*"]),
      );
      expect(res.headers.get("access-control-allow-credentials")).toBeNull(); // never credentialed
      expect(await res.text()).toBe("");
    }
  });

  test("a cross-origin chat call can read its rate-limit header; its errors carry CORS too", async () => {
    const { key } = await open.newWallet(1);
    const res = await open.handle(
      new Request(BASE + "/v1/chat/completions", {
        method: "POST",
        headers: { origin: DAPP, authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "standin/echo", messages: [{ role: "user", content: "hi" }] }),
      }),
    );
    expect(res.status).toBe(200);
    expect(res.headers.get("access-control-allow-origin")).toBe("*");
    expect(res.headers.get("x-ratelimit-remaining")).not.toBeNull();
    const exposed = list(res.headers.get("access-control-expose-headers"));
    expect(exposed).toEqual(
      expect.arrayContaining([
        "payment-required",
        "payment-response",
        "x-payment-response",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
        "x-served-model",
        "retry-after",
        "x-tools-left-out",
        "x-request-id",
      ]),
    );
    expect(res.headers.get("vary")).toBeNull(); // one answer for every origin: caches need not split
    await res.text();

    const body = JSON.stringify({ model: "standin/echo", messages: [{ role: "user", content: "hi" }] });
    const denied = await open.handle(new Request(BASE + "/v1/chat/completions", { method: "POST", headers: { origin: DAPP }, body }));
    expect(denied.status).toBe(401);
    expect(denied.headers.get("access-control-allow-origin")).toBe("*");
    const models = await open.handle(new Request(BASE + "/v1/models", { headers: { origin: DAPP } }));
    expect(models.headers.get("access-control-allow-origin")).toBe("*");
  });

  test("the SIWE sign-in a dApp starts with is readable cross-origin", async () => {
    const res = await open.handle(new Request(BASE + "/v1/auth/siwe", { headers: { origin: DAPP } }));
    expect(res.status).toBe(200);
    expect(res.headers.get("access-control-allow-origin")).toBe("*");
  });
});

describe("CORS_ORIGINS as a list", () => {
  test("a listed origin is allowed by name, with Vary: Origin", async () => {
    const pre = await preflight(listed, "/v1/chat/completions", "https://app.example");
    expect(pre.status).toBe(204);
    expect(pre.headers.get("access-control-allow-origin")).toBe("https://app.example");
    expect(pre.headers.get("vary")).toBe("Origin");
    const res = await listed.handle(new Request(BASE + "/v1/models", { headers: { origin: "http://localhost:3000" } }));
    expect(res.headers.get("access-control-allow-origin")).toBe("http://localhost:3000");
    expect(res.headers.get("vary")).toBe("Origin");
  });

  test("another origin gets no grant: the browser blocks it", async () => {
    const pre = await preflight(listed, "/v1/chat/completions", DAPP);
    expect(pre.status).toBe(204);
    expect(pre.headers.get("access-control-allow-origin")).toBeNull();
    expect(pre.headers.get("access-control-allow-methods")).toBeNull();
    expect(pre.headers.get("access-control-allow-headers")).toBeNull();
    const res = await listed.handle(new Request(BASE + "/v1/models", { headers: { origin: DAPP } }));
    expect(res.status).toBe(200); // the server answers; the browser hides it from the page
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    expect(res.headers.get("access-control-expose-headers")).toBeNull();
    expect(res.headers.get("vary")).toBe("Origin");
  });

  test("an origin with a path or no scheme is a configuration error naming CORS_ORIGINS", () => {
    for (const bad of ["https://app.example/", "app.example", "https://a.example,https://b.example/x"]) {
      expect(() => loadConfig({ CORS_ORIGINS: bad, LOG_LEVEL: "error" })).toThrow(/^CORS_ORIGINS: /);
    }
    expect(loadConfig({ CORS_ORIGINS: "*" }).corsOrigins).toBe("*");
    expect(loadConfig({}).corsOrigins).toBe("*");
  });
});
