import { Elysia } from "elysia";
import type { Services } from "../../services.ts";

/** GET /v1/models: the catalog with billed prices, rendered once at start. */
export const modelsRoutes = (s: Services) =>
  new Elysia({ tags: ["models"] }).get(
    "/v1/models",
    () => new Response(s.config.catalog.modelListJson, { headers: { "content-type": "application/json" } }),
    { detail: { summary: "Models and their prices (USD per 1M tokens)" } },
  );
