import { openapi } from "@elysiajs/openapi";
import { Elysia } from "elysia";
import swaggerCss from "swagger-ui-dist/swagger-ui.css" with { type: "file" };
import swaggerJs from "swagger-ui-dist/swagger-ui-bundle.js" with { type: "file" };
import { COMPONENTS, REQUEST_BODIES } from "./components.ts";
import { HEADERS, OWN_PARAMETERS, OWN_PATH, OWN_REQUEST_BODY, SECURITY_SCHEMES } from "./document.ts";

/** API version of the document (the spec's interface version). */
export const API_VERSION = "1.0.0";

const ASSETS = "/docs/assets";
// Pinned in package.json and embedded by `bun build --compile`: the page works offline and never changes under us.
const assetRoutes = new Elysia({ name: "docs-assets" })
  .get(`${ASSETS}/swagger-ui-bundle.js`, () => asset(swaggerJs, "text/javascript; charset=utf-8"), { detail: { hide: true } })
  .get(`${ASSETS}/swagger-ui.css`, () => asset(swaggerCss, "text/css; charset=utf-8"), { detail: { hide: true } });

function asset(path: string, type: string): Response {
  return new Response(Bun.file(path), { headers: { "content-type": type, "cache-control": "public, max-age=86400" } });
}

/** Named request bodies, so routes validate with the documented schema: `.use(requestBodies)`, `body: "TopupRequest"`. */
export const requestBodies = new Elysia({ name: "request-bodies" }).model(REQUEST_BODIES);

/**
 * GET /docs (Swagger UI from the swagger-ui-dist package) and GET /docs/json (OpenAPI 3.1 from the routes: their
 * request schemas, and the answers, headers and security each declares in `detail` through openapi/document.ts).
 */
export const openapiDocs = () =>
  new Elysia({ name: "openapi-docs" })
    .use(assetRoutes)
    .onAfterHandle({ as: "local" }, ({ path, response }) => {
      if (path === "/docs/json") applyOwnParts(response as Document);
    })
    .use(
      openapi({
        path: "/docs",
        provider: "swagger-ui",
        swagger: { cdn: `${ASSETS}/swagger-ui-bundle.js`, theme: `${ASSETS}/swagger-ui.css`, autoDarkMode: false },
        documentation: {
          info: {
            title: "LLM credit gateway",
            version: API_VERSION,
            description:
              "Prepaid, OpenAI-compatible inference gateway. Amounts are integer µUSDC (1 USD = 1,000,000) unless a field says USD. " +
              "Every answer carries X-Request-Id.",
          },
          tags: [
            { name: "chat", description: "OpenAI-compatible chat completions" },
            { name: "models" },
            { name: "balance" },
            { name: "usage" },
            { name: "keys", description: "API keys, managed with Sign-In with Ethereum" },
            { name: "topup", description: "Prepaid credit through x402" },
            { name: "health" },
            { name: "operations", description: "Extensions for operators" },
          ],
          components: {
            schemas: COMPONENTS as never,
            headers: HEADERS as never,
            securitySchemes: SECURITY_SCHEMES as never,
          },
        },
      }),
    );

type Parameter = { name: string; in: string };
type Operation = {
  parameters?: Parameter[];
  requestBody?: unknown;
  [OWN_PARAMETERS]?: Parameter[];
  [OWN_REQUEST_BODY]?: unknown;
  [OWN_PATH]?: string;
};
type Document = { paths?: Record<string, Record<string, Operation>> };

/** Puts each operation's own path, parameters and body (doc()) in place of the generated ones; idempotent. */
function applyOwnParts(d: Document): void {
  for (const [path, item] of Object.entries(d.paths ?? {})) {
    for (const [method, op] of Object.entries(item)) {
      const own = op[OWN_PATH];
      if (own) {
        // A wildcard route: its generated parameters name "*"; the document shows the path and parameters it gives.
        delete op[OWN_PATH];
        op.parameters = (op.parameters ?? []).filter((p) => p.name !== "*");
        d.paths![own] = { ...d.paths![own], [method]: op };
        delete item[method];
        if (Object.keys(item).length === 0) delete d.paths![path];
      }
    }
  }
  for (const item of Object.values(d.paths ?? {})) {
    for (const op of Object.values(item)) {
      const own = op[OWN_PARAMETERS];
      if (own) {
        const kept = (op.parameters ?? []).filter((p) => !own.some((o) => o.name === p.name && o.in === p.in));
        op.parameters = [...kept, ...own];
        delete op[OWN_PARAMETERS];
      }
      if (op[OWN_REQUEST_BODY]) {
        op.requestBody = op[OWN_REQUEST_BODY];
        delete op[OWN_REQUEST_BODY];
      }
    }
  }
}
