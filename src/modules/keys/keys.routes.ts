import { Elysia, t } from "elysia";
import type { Services } from "../../services.ts";
import { ApiError } from "../../errors.ts";
import { ErrorBody, SiweQuery } from "../schemas.ts";

// Missing or malformed SIWE credentials are the spec's 401, not a 400: the verifier checks them (sizes included).
const SiweBody = { message: t.Optional(t.String()), signature: t.Optional(t.String()) };

/** POST/GET/DELETE /v1/auth/keys: SIWE-authenticated key management. */
export const keysRoutes = (s: Services) =>
  new Elysia({ tags: ["keys"] })
    .post(
      "/v1/auth/keys",
      async ({ body, set }) => {
        if (body.ref_code !== undefined && body.redeem_code !== undefined) {
          throw new ApiError("VALIDATION_ERROR", "ref_code and redeem_code are mutually exclusive");
        }
        const wallet = await s.siwe.verify(body, "once");
        const created = await s.keys.create(wallet, body);
        set.status = 201;
        set.headers["cache-control"] = "no-store";
        return created;
      },
      {
        parse: "json",
        body: t.Object({
          ...SiweBody,
          label: t.Optional(t.String({ maxLength: 100 })),
          budget_usdc: t.Optional(t.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER, description: "Per-key spending cap, µUSDC (extension)" })),
          ref_code: t.Optional(t.String({ minLength: 1, maxLength: 64 })),
          redeem_code: t.Optional(t.String({ minLength: 1, maxLength: 64 })),
        }),
        response: {
          201: t.Object({ id: t.Integer(), key: t.String(), label: t.String(), created_at: t.String() }, { additionalProperties: true }),
          400: ErrorBody,
          401: ErrorBody,
        },
        detail: { summary: "Create an API key (plaintext returned once)" },
      },
    )
    .get(
      "/v1/auth/keys",
      async ({ query }) => ({ data: await s.keys.list(await s.siwe.verify(query, "reuse")) }),
      { query: SiweQuery, detail: { summary: "List the signer's API keys" } },
    )
    .delete(
      "/v1/auth/keys/:key_id",
      async ({ params, body }) => {
        const wallet = await s.siwe.verify(body ?? {}, "once");
        await s.keys.revoke(wallet, Number(params.key_id));
        return { revoked: true };
      },
      {
        // Digits only, within bigint: "1e0" or 2^64 is a 400, never a coerced id or a database error.
        params: t.Object({ key_id: t.String({ pattern: "^[1-9][0-9]{0,14}$" }) }),
        parse: "json",
        body: t.Optional(t.Object(SiweBody, { additionalProperties: true })),
        response: { 200: t.Object({ revoked: t.Boolean() }), 401: ErrorBody, 404: ErrorBody },
        detail: { summary: "Revoke an API key" },
      },
    );
