import { Elysia } from "elysia";
import { SIWE_CLOCK_SKEW_MS, SIWE_MAX_AGE_MS, siweNonce } from "../../auth/siwe.ts";
import { doc, json } from "../../openapi/document.ts";
import type { Services } from "../services.ts";

/**
 * GET /v1/auth/siwe: everything a client needs to build an acceptable Sign-In with Ethereum message, so that no
 * rule is guesswork. The nonce is not stored: replays are refused by the message's hash (docs/clients.md "Signing in").
 */
export const siweRoutes = (s: Services) =>
  new Elysia({ tags: ["keys"] }).get(
    "/v1/auth/siwe",
    ({ request, set }) => {
      const url = new URL(request.url);
      const domain = s.siwe.domainFor(request.headers.get("host") ?? url.host);
      // Locally the scheme is whatever the client used; deployed gateways sit behind TLS.
      const scheme = s.config.deployment === "local" ? url.protocol.slice(0, -1) : "https";
      set.headers["cache-control"] = "no-store";
      return {
        domain,
        uri: `${scheme}://${domain}`,
        version: "1" as const,
        chain_ids: s.config.siweChainIds,
        nonce: siweNonce(),
        statement: null,
        issued_at_max_age_s: SIWE_MAX_AGE_MS / 1000,
        clock_skew_s: SIWE_CLOCK_SKEW_MS / 1000,
        expiration_max_s: null,
      };
    },
    {
      detail: doc({
        summary: "SIWE parameters (domain, uri, chain ids, lifetime rules) and a fresh nonce (extension)",
        responses: {
          200: json(
            "SiweParameters",
            "Build the message from these; sign it; send it with POST /v1/auth/keys",
            {
              domain: "localhost:8080",
              uri: "http://localhost:8080",
              version: "1",
              chain_ids: [84532],
              nonce: "k2Jq9X0aLm3PZ7rT",
              statement: null,
              issued_at_max_age_s: 600,
              clock_skew_s: 60,
              expiration_max_s: null,
            },
            ["Cache-Control"],
          ),
        },
      }),
    },
  );
