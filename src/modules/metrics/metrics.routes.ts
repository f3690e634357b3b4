import { Elysia } from "elysia";
import { registry } from "../../observe/metrics.ts";
import { metricsText } from "../../observe/peers.ts";
import { scrapeLive } from "./scrape.ts";
import type { Services } from "../services.ts";
import { doc, text } from "../../openapi/document.ts";

/** GET /metrics: Prometheus text format; every worker's counters summed, plus a bounded read of Redis and Postgres. */
export const metricsRoutes = (s: Services) =>
  new Elysia({ tags: ["operations"] }).get(
    "/metrics",
    async () => {
      await scrapeLive(s);
      return new Response(await metricsText(), { headers: { "content-type": registry.contentType } });
    },
    {
      detail: doc({
        summary: "Prometheus metrics (extension)",
        description: "Prometheus text exposition format 0.0.4. No authentication: expose it to your scraper only.",
        responses: {
          200: text("Metrics in Prometheus text format (Content-Type: text/plain; version=0.0.4)", "text/plain", "gateway_redis_up 1\n"),
        },
      }),
    },
  );
