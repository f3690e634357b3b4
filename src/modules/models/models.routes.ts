import { Elysia } from "elysia";
import { ApiError } from "../../errors.ts";
import type { Services } from "../../services.ts";

const JSON_TYPE = { "content-type": "application/json" };

/** GET /v1/models and GET /v1/models/{id}: the catalog with billed prices, rendered once at start. */
export const modelsRoutes = (s: Services) =>
  new Elysia({ tags: ["models"] })
    .get("/v1/models", () => new Response(s.config.catalog.modelListJson, { headers: JSON_TYPE }), {
      detail: { summary: "Models and their prices (USD per 1M tokens)" },
    })
    // Model ids contain slashes (openai/gpt-4o, openrouter/meta-llama/…): the id is the whole rest of the path.
    .get(
      "/v1/models/*",
      ({ params }) => {
        const id = decodeURIComponent(params["*"]);
        const json = s.config.catalog.modelJson.get(id);
        if (json) return new Response(json, { headers: JSON_TYPE });
        const off = s.config.catalog.disabled.get(id);
        throw new ApiError("NOT_FOUND", off ? `Model "${id}" is not served: its provider "${off.name}" is not configured` : "No such model");
      },
      { detail: { summary: "One model and its prices (extension); the id may contain slashes" } },
    );
