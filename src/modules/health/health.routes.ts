import { Elysia } from "elysia";
import type { Services } from "../../services.ts";

/** GET /health: "ok" when Redis and Postgres answer, "degraded" (503) when one does not. */
export const healthRoutes = (s: Services) =>
  new Elysia({ tags: ["health"] }).get(
    "/health",
    async ({ set }) => {
      const [redis, db] = await Promise.all([
        s.redis.ping().then(() => true, () => false),
        s.sql`SELECT 1`.then(() => true, () => false),
      ]);
      if (redis && db) return { status: "ok" };
      set.status = 503;
      return { status: "degraded", redis: redis ? "ok" : "down", postgres: db ? "ok" : "down" };
    },
    { detail: { summary: "Liveness and dependencies" } },
  );
