import { openapi } from "@elysiajs/openapi";
import { Elysia, ValidationError } from "elysia";
import { cors } from "./cors.ts";
import { ApiError, errorResponse, PlainError } from "./errors.ts";
import { log } from "./log.ts";
import { balanceRoutes } from "./modules/balance/balance.routes.ts";
import { chatRoutes } from "./modules/chat/chat.routes.ts";
import { healthRoutes } from "./modules/health/health.routes.ts";
import { keysRoutes } from "./modules/keys/keys.routes.ts";
import { siweRoutes } from "./modules/keys/siwe.routes.ts";
import { modelsRoutes } from "./modules/models/models.routes.ts";
import { topupRoutes } from "./modules/topup/topup.routes.ts";
import { topupsRoutes } from "./modules/topup/topups.routes.ts";
import { usageRoutes } from "./modules/usage/usage.routes.ts";
import type { Services } from "./services.ts";

function validationMessage(error: ValidationError): string {
  try {
    const first = error.all[0] as { path?: string; summary?: string; message?: string } | undefined;
    // The path names the field; where it is empty, the part of the request (body, query, params) does.
    if (first) return `${first.path || error.type}: ${first.summary ?? first.message ?? "invalid"}`.slice(0, 300);
  } catch {
    // fall through to the generic text
  }
  return "Invalid request parameters";
}

/**
 * Largest request body: a full 1M-token context is ~4 MB of text and images come base64-encoded, so 32 MiB serves
 * any real request while a runaway upload is refused before it is read. main passes it on to Bun.serve too.
 */
export const MAX_BODY_BYTES = 32 * 1024 * 1024;

/** Builds the HTTP app from services; main listens on it, tests call `app.handle(request)`. */
export function createApp(s: Services) {
  return new Elysia()
    // First, so that every answer (errors, the body-size refusal below, streams) carries the CORS headers.
    .use(cors(s.config.corsOrigins))
    .onRequest(({ request }) => {
      const length = request.headers.get("content-length");
      if (length !== null && Number(length) > MAX_BODY_BYTES) {
        return errorResponse(new ApiError("VALIDATION_ERROR", `Request body too large (at most ${MAX_BODY_BYTES} bytes)`));
      }
    })
    .use(
      openapi({
        path: "/docs",
        documentation: {
          info: { title: "LLM credit gateway", version: "1.0.0", description: "Prepaid, OpenAI-compatible inference gateway" },
          components: { securitySchemes: { bearer: { type: "http", scheme: "bearer" } } },
        },
      }),
    )
    .onError(({ code, error }) => {
      if (error instanceof ApiError) return errorResponse(error);
      if (error instanceof PlainError) return Response.json({ error: error.message }, { status: error.status });
      if (code === "VALIDATION") {
        // A response that fails its own schema is our bug, not the client's: 500, with the detail in the log only.
        if ((error as ValidationError).type === "response") {
          log.error("response failed its schema", { error: validationMessage(error as ValidationError) });
          return errorResponse(new ApiError("INTERNAL_ERROR"));
        }
        return errorResponse(new ApiError("VALIDATION_ERROR", validationMessage(error as ValidationError)));
      }
      if (code === "PARSE") return errorResponse(new ApiError("VALIDATION_ERROR", "Body is not valid JSON"));
      if (code === "NOT_FOUND") return errorResponse(new ApiError("NOT_FOUND", "No such route"));
      log.error("unhandled error", { code, error });
      return errorResponse(new ApiError("INTERNAL_ERROR"));
    })
    .use(healthRoutes(s))
    .use(modelsRoutes(s))
    .use(balanceRoutes(s))
    .use(siweRoutes(s))
    .use(keysRoutes(s))
    .use(usageRoutes(s))
    .use(topupRoutes(s))
    .use(topupsRoutes(s))
    .use(chatRoutes(s));
}

export type App = ReturnType<typeof createApp>;
