import { Elysia } from "elysia";
import { dependencyStates } from "./dependencies.ts";
import { doc, json } from "../../openapi/document.ts";
import type { Services } from "../services.ts";

/** GET /health: "ok" when Redis and Postgres answer, "degraded" (503) when one does not; each one's state beside. */
export const healthRoutes = (s: Services) =>
  new Elysia({ tags: ["health"] }).get(
    "/health",
    async ({ set }) => {
      const deps = await dependencyStates(s);
      const ok = deps.redis === "up" && deps.postgres === "up";
      if (!ok) set.status = 503;
      return { status: ok ? "ok" : "degraded", ...deps };
    },
    {
      detail: doc({
        summary: "Liveness and dependencies",
        responses: {
          200: json("Health", "Redis and Postgres answer", { status: "ok", redis: "up", postgres: "up" }),
          503: json("Health", "A dependency does not answer", { status: "degraded", redis: "down", postgres: "up" }),
        },
      }),
    },
  );
