import { Elysia } from "elysia";
import { doc, json } from "../../openapi/document.ts";
import type { Services } from "../../services.ts";

const EXAMPLE = {
  object: "list",
  data: [
    {
      id: "openai/gpt-4o-mini",
      object: "model",
      name: "GPT-4o mini",
      provider: "openai",
      contextLength: 128_000,
      promptPricePer1MTokens: 0.18,
      completionPricePer1M: 0.72,
    },
  ],
};

/** GET /v1/models: the catalog with billed prices, rendered once at start. */
export const modelsRoutes = (s: Services) =>
  new Elysia({ tags: ["models"] }).get(
    "/v1/models",
    () => new Response(s.config.catalog.modelListJson, { headers: { "content-type": "application/json" } }),
    {
      detail: doc({
        summary: "Models and their prices (USD per 1M tokens)",
        responses: { 200: json("ModelList", "The catalog, with the billed prices", EXAMPLE) },
      }),
    },
  );
