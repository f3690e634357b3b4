import { Elysia, t } from "elysia";
import { generateSiweNonce } from "viem/siwe";
import { SIWE_CLOCK_SKEW_MS, SIWE_MAX_AGE_MS } from "../../auth/siwe.ts";
import type { Services } from "../../services.ts";

/** What GET /v1/auth/siwe answers; the wallet dashboard builds its messages from exactly these fields. */
export const SiweParameters = t.Object({
  domain: t.String({ description: "The message's domain (host[:port])" }),
  uri: t.String({ description: "A URI on that domain for the message's URI field" }),
  version: t.Literal("1"),
  chain_ids: t.Array(t.Integer(), { description: "Accepted Chain IDs" }),
  nonce: t.String({ description: "A fresh nonce (any nonce of ≥ 8 letters or digits is accepted; replay is refused by message)" }),
  statement: t.Union([t.String(), t.Null()], { description: "Required statement, or null: any statement (or none) is accepted" }),
  issued_at_max_age_s: t.Integer({ description: "A message is accepted at most this many seconds after its Issued At" }),
  clock_skew_s: t.Integer({ description: "How far Issued At and Not Before may lie in the future" }),
  expiration_max_s: t.Union([t.Integer(), t.Null()], {
    description: "Upper bound on Expiration Time − Issued At, or null: Expiration Time is optional and unbounded",
  }),
});

/**
 * GET /v1/auth/siwe: everything a client needs to build an acceptable Sign-In with Ethereum message, so that no
 * rule is guesswork. The nonce is not stored: replays are refused by the message's hash (design §5).
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
        nonce: generateSiweNonce(),
        statement: null,
        issued_at_max_age_s: SIWE_MAX_AGE_MS / 1000,
        clock_skew_s: SIWE_CLOCK_SKEW_MS / 1000,
        expiration_max_s: null,
      };
    },
    {
      response: { 200: SiweParameters },
      detail: { summary: "SIWE parameters (domain, uri, chain ids, lifetime rules) and a fresh nonce (extension)" },
    },
  );
