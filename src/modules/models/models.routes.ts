import { Elysia } from "elysia";
import { modelAllowed } from "../../auth/keyLimits.ts";
import { ApiError } from "../../errors.ts";
import { doc, errors, json, pathParam, responses } from "../../openapi/document.ts";
import type { Services } from "../services.ts";

const JSON_TYPE = { "content-type": "application/json" };

const MODEL_EXAMPLE = {
  id: "openai/gpt-4o-mini",
  object: "model",
  name: "GPT-4o mini",
  provider: "openai",
  contextLength: 128_000,
  promptPricePer1MTokens: 0.18,
  completionPricePer1M: 0.72,
  aliases: ["gpt-4o-mini"],
  available: true,
};

/** GET /v1/models and GET /v1/models/{id}: the catalog with billed prices, rendered when a provider's reachability changes. */
export const modelsRoutes = (s: Services) =>
  new Elysia({ tags: ["models"] })
    .get(
      "/v1/models",
      async ({ request }) => {
        const authorization = request.headers.get("authorization");
        if (authorization === null) return new Response(s.reachability.list, { headers: JSON_TYPE });
        // A key limited to some models (its `models` list) sees only those; any other key, the whole list.
        const { limits } = await s.apiKeyAuth.fromHeader(authorization);
        const list = limits?.models ? s.reachability.listOf((id) => modelAllowed(limits, id)) : s.reachability.list;
        return new Response(list, { headers: JSON_TYPE });
      },
      {
        detail: doc({
          summary: "Models and their prices (USD per 1M tokens)",
          description:
            "`available` (an extension) is false while the model's provider, a keyless local server, did not answer its last " +
            "reachability probe; providers with a key are not probed and always listed as available. No authentication is " +
            "needed; with an API key (Authorization: Bearer) the list is what that key may call (its `models`, an extension), " +
            "and an invalid key is 401.",
          responses: responses(
            { 200: json("ModelList", "The catalog, with the billed prices", { object: "list", data: [MODEL_EXAMPLE] }) },
            errors("UNAUTHORIZED"),
          ),
        }),
      },
    )
    // Model ids contain slashes (openai/gpt-4o, openrouter/meta-llama/…): the id is the whole rest of the path.
    .get(
      "/v1/models/*",
      ({ params }) => {
        const id = decodeURIComponent(params["*"]);
        const json = s.reachability.model(id);
        if (json) return new Response(json, { headers: JSON_TYPE });
        const off = s.config.catalog.disabled.get(id);
        throw new ApiError({
          code: "NOT_FOUND",
          message: off ? `Model "${id}" is not served: its provider "${off.name}" is not configured` : "No such model",
        });
      },
      {
        detail: doc({
          summary: "One model and its prices (extension)",
          path: "/v1/models/{id}",
          parameters: [
            pathParam("id", "Model id; it contains slashes (openai/gpt-4o), sent as they are", {
              type: "string",
              examples: ["openai/gpt-4o-mini"],
            }),
          ],
          responses: responses({ 200: json("Model", "The model", MODEL_EXAMPLE) }, errors("NOT_FOUND")),
        }),
      },
    );
