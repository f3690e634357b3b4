import { gzipSync } from "bun";
import { Elysia } from "elysia";
import { SIWE_CLOCK_SKEW_MS, SIWE_MAX_AGE_MS } from "../auth/siwe.ts";
import type { Config } from "../config.ts";
import type { NetworkId } from "../payments/networks.ts";
import { MIN_TOPUP_USD } from "../modules/topup/topup.service.ts";
import type { Services } from "../modules/services.ts";
import type { PageConfig } from "./pageConfig.ts";
import { doc, text } from "../openapi/document.ts";

/** Block explorers of the real networks; a local chain has none, so the page shows bare transaction hashes. */
const EXPLORERS: Record<NetworkId, string | null> = {
  base: "https://basescan.org",
  "base-sepolia": "https://sepolia.basescan.org",
  local: null,
};

// The page talks to this origin only (the wallet talks to its own node); wallets inject through their extension.
const CSP =
  "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/** What the page needs to know about this deployment (see PageConfig). */
export function pageConfig(config: Config, topupsEnabled: boolean): PageConfig {
  const chain = config.payments.chain;
  return {
    siwe: { domain: config.siweDomain, chainIds: config.siweChainIds, maxAgeS: SIWE_MAX_AGE_MS / 1000, skewS: SIWE_CLOCK_SKEW_MS / 1000 },
    network: { name: chain.name, chainId: chain.chainId, testnet: chain.testnet, explorer: EXPLORERS[chain.id] },
    assets: chain.assets.map((a) => ({ symbol: a.symbol, address: a.address, decimals: a.decimals })),
    topupsEnabled,
    minTopupUsd: MIN_TOPUP_USD,
  };
}

interface Asset {
  body: string;
  gzip: Uint8Array<ArrayBuffer>;
  type: string;
  cache: string;
}

/** One built file, answered gzipped to clients that take it (every browser does). */
function serve(a: Asset, request: Request, status = 200): Response {
  const gzip = /\bgzip\b/.test(request.headers.get("accept-encoding") ?? "");
  const headers: Record<string, string> = {
    "content-type": a.type,
    "cache-control": a.cache,
    vary: "accept-encoding",
    "x-content-type-options": "nosniff",
  };
  if (a.type.startsWith("text/html")) Object.assign(headers, { "content-security-policy": CSP, "referrer-policy": "no-referrer" });
  if (gzip) headers["content-encoding"] = "gzip";
  return new Response(gzip ? a.gzip : a.body, { status, headers });
}

/**
 * GET /: the wallet dashboard (docs/clients.md "Dashboard"), and its script. Built into the program by a Bun macro (assets.ts),
 * loaded on the first request for it, so a gateway that nobody opens in a browser never pays for it.
 */
export const dashboardRoutes = (s: Services) => {
  let loaded: Promise<{ html: Asset; js: Asset; path: string }> | undefined;
  const load = () =>
    (loaded ??= import("./assets.ts").then(({ bundle }) => {
      const path = `/dashboard/app.${bundle.hash}.js`;
      // `<` escaped, so no value in the config can close the script element it sits in.
      const config = JSON.stringify(pageConfig(s.config, s.topup.enabled)).replace(/</g, "\\u003c");
      const html = bundle.html.replace("/*CONFIG*/", config).replace("/*SCRIPT*/", path);
      const asset = (body: string, type: string, cache: string): Asset => ({
        body,
        gzip: gzipSync(body) as Uint8Array<ArrayBuffer>,
        type,
        cache,
      });
      return {
        html: asset(html, "text/html; charset=utf-8", "no-cache"),
        js: asset(bundle.js, "text/javascript; charset=utf-8", "public, max-age=31536000, immutable"),
        path,
      };
    }));
  return new Elysia({ tags: ["dashboard"] })
    .get("/", async ({ request }) => serve((await load()).html, request), {
      detail: doc({
        summary: "The wallet dashboard (HTML)",
        description: "Connect a browser wallet, sign in with SIWE, manage API keys, see credit and spend, top up with x402.",
        responses: { 200: text("The page (its script is served beside it, same origin)", "text/html", "<!doctype html>…") },
      }),
    })
    .get(
      "/dashboard/:file",
      async ({ params, request }) => {
        const a = await load();
        if (`/dashboard/${params.file}` !== a.path) return Response.json({ error: "NOT_FOUND", message: "No such file" }, { status: 404 });
        return serve(a.js, request);
      },
      { detail: { hide: true } },
    );
};
