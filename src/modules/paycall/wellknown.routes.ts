import { Elysia } from "elysia";
import { doc } from "../../openapi/document.ts";
import type { Services } from "../services.ts";

/** The resources x402 clients can pay at, with what each does with the money. */
const PAYABLE = [
  { path: "/v1/topup", description: "Top up a wallet's prepaid credit (the body's amount, at least 1 USD) with x402" },
  {
    path: "/v1/chat/completions",
    description: "OpenAI chat completions; a 402 for lack of credit is paid to the API key's wallet, then served",
  },
  { path: "/v1/responses", description: "OpenAI Responses API; a 402 for lack of credit is paid to the API key's wallet, then served" },
  { path: "/v1/messages", description: "Anthropic Messages API; a 402 for lack of credit is paid to the API key's wallet, then served" },
];
const LAST_UPDATED = Math.floor(Date.now() / 1000);

/**
 * GET /.well-known/x402 (and /.well-known/x402.json): the payable resources, so x402 indexes can find the gateway.
 * One document read both ways: x402's discovery manifest (`x402Version: 2`, `items` with each resource's advisory
 * terms at the smallest amount and how to call it) and the plain list (`version: 1`, `resources`) that older
 * crawlers read. The live 402 stays authoritative for the amount.
 */
export const wellKnownRoutes = (s: Services) => {
  const manifest = () => {
    const origin = s.config.publicUrl; // never the request's Host: a cache may serve this document to everyone
    const items = !s.topup.enabled
      ? []
      : PAYABLE.map(({ path, description }) => {
          const url = origin + path;
          const micro = path === "/v1/topup" ? 1_000_000 : s.config.payments.callMinMicro;
          return {
            resource: { url, description, mimeType: "application/json" },
            type: "http",
            accepts: s.topup.offer(micro, url, undefined, description).v2.accepts,
            input: { method: "POST", routeTemplate: path, bodyType: "json" },
          };
        });
    return {
      version: 1,
      resources: items.map((i) => i.resource.url),
      x402Version: 2,
      lastUpdated: LAST_UPDATED,
      items,
      instructions:
        "Model endpoints need an API key (POST /v1/auth/keys, signed in with SIWE); without credit they answer 402 with x402 terms, " +
        "and the same request resent with PAYMENT-SIGNATURE or X-PAYMENT credits the key's wallet and is served. See /docs.",
    };
  };
  const detail = doc({
    summary: "Payable resources for x402 discovery (extension)",
    description:
      "x402 discovery: `items` (x402Version 2 manifest: resource, type, advisory accepts at the smallest amount, input) and `resources` " +
      "(the same URLs as a plain list, version 1). Empty when the gateway takes no payments.",
    responses: {
      200: {
        description: "The discovery document",
        content: { "application/json": { schema: { type: "object", required: ["version", "resources", "x402Version", "items"] } } },
      },
    },
  });
  return new Elysia({ tags: ["topup"] })
    .get("/.well-known/x402", manifest, { detail })
    .get("/.well-known/x402.json", manifest, { detail: { ...detail, hide: true } });
};
