import { Type } from "@sinclair/typebox";
import { Elysia, t } from "elysia";
import type { Services } from "../services.ts";
import { checkKeyModels } from "../../auth/keyLimits.ts";
import { ApiError } from "../../errors.ts";
import { traceOf } from "../../observe/trace.ts";
import { COMPONENTS } from "../../openapi/components.ts";
import { body, doc, errors, json, pathParam, responses, SECURITY } from "../../openapi/document.ts";

// The document marks message and signature required (a client must send them), but a missing or malformed one is
// the spec's 401 like any failed sign-in, not a validation 400: the routes let them through to the verifier.
const LooseSiwe = { message: Type.Optional(Type.Unknown()), signature: Type.Optional(Type.Unknown()) };
const { message: _m, signature: _s, ...createFields } = COMPONENTS.ApiKeyCreateRequest.properties;
const CreateBody = Type.Object({ ...createFields, ...LooseSiwe });

const SIGNED = { message: "gateway.example wants you to sign in with your Ethereum account:\n0x…", signature: `0x${"ab".repeat(65)}` };
const CREATED = { id: 42, key: `sk-${"0f".repeat(32)}`, label: "laptop", created_at: "2026-01-01T12:00:00.000Z" };

/** POST/GET/DELETE /v1/auth/keys: SIWE-authenticated key management. */
export const keysRoutes = (s: Services) =>
  new Elysia({ tags: ["keys"] })
    .post(
      "/v1/auth/keys",
      async ({ body: input, request, set }) => {
        // Checked before the sign-in, which spends the signed message: a request that cannot succeed must not use it up.
        if (input.ref_code !== undefined && input.redeem_code !== undefined) {
          throw new ApiError({ code: "VALIDATION_ERROR", message: "ref_code and redeem_code are mutually exclusive" });
        }
        if (input.models !== undefined) checkKeyModels(input.models, s.config.catalog);
        const wallet = await s.siwe.verify(input, "once");
        traceOf(request).wallet = wallet;
        const created = await s.keys.create(wallet, input);
        set.status = 201;
        set.headers["cache-control"] = "no-store";
        return created;
      },
      {
        parse: "json",
        body: CreateBody,
        detail: doc({
          summary: "Create an API key (plaintext returned once)",
          description:
            "SIWE in the body. A message is accepted once. A redeem_code credits the wallet (redeemed_credit_usdc). " +
            "`models` and `requests_per_minute` (extensions) limit the key for its whole life. A wallet has at most " +
            "MAX_KEYS_PER_WALLET (100) active keys: past it 409 KEY_LIMIT_REACHED until one is revoked.",
          requestBody: body("ApiKeyCreateRequest", {
            ...SIGNED,
            label: "ci",
            models: ["openai/gpt-4o-mini", "anthropic/*"],
            requests_per_minute: 60,
          }),
          responses: responses(
            { 201: json("ApiKeyCreateResponse", "The new key; its plaintext is never shown again", CREATED, ["Cache-Control"]) },
            errors("VALIDATION_ERROR", "UNAUTHORIZED", "KEY_LIMIT_REACHED", "REQUEST_TIMEOUT", "PAYLOAD_TOO_LARGE"),
          ),
        }),
      },
    )
    .get(
      "/v1/auth/keys",
      async ({ query, request }) => {
        const wallet = await s.siwe.verify(query, "reuse");
        traceOf(request).wallet = wallet;
        return { data: await s.keys.list(wallet) };
      },
      {
        detail: doc({
          summary: "List the signer's API keys",
          description: "SIWE as the query parameters message and signature (a message may be reused until it expires).",
          security: [SECURITY.siweQuery],
          responses: responses(
            {
              200: json("ApiKeyList", "Every key of the wallet, oldest first; never a plaintext", {
                data: [
                  { ...CREATED, key: undefined, revoked_at: null, models: null, requests_per_minute: null },
                  {
                    ...CREATED,
                    id: 43,
                    label: "ci",
                    key: undefined,
                    revoked_at: null,
                    models: ["openai/gpt-4o-mini", "anthropic/*"],
                    requests_per_minute: 60,
                  },
                ],
              }),
            },
            errors("UNAUTHORIZED"),
          ),
        }),
      },
    )
    .delete(
      "/v1/auth/keys/:key_id",
      async ({ params, body, request }) => {
        const wallet = await s.siwe.verify(body ?? {}, "once");
        traceOf(request).wallet = wallet;
        await s.keys.revoke(wallet, Number(params.key_id));
        return { revoked: true };
      },
      {
        // Digits only, within bigint: "1e0" or 2^64 is a 400, never a coerced id or a database error.
        params: t.Object({ key_id: t.String({ pattern: "^[1-9][0-9]{0,14}$", description: "Key id (an integer)" }) }),
        parse: "json",
        // Optional and loose: a missing body or SIWE field is the verifier's 401 (the document shows SiweAuth).
        body: t.Optional(Type.Object(LooseSiwe)),
        detail: doc({
          summary: "Revoke an API key",
          description: "SIWE in the body (SiweAuth); a message is accepted once. Revoking a revoked key again answers 200.",
          parameters: [
            pathParam("key_id", "Id of the key (from its creation or the listing)", {
              type: "integer",
              minimum: 1,
              maximum: 999_999_999_999_999,
            }),
          ],
          requestBody: body("SiweAuth", SIGNED),
          responses: responses(
            { 200: json("ApiKeyRevokeResponse", "Revoked", { revoked: true }) },
            errors("VALIDATION_ERROR", "UNAUTHORIZED", "NOT_FOUND", "REQUEST_TIMEOUT", "PAYLOAD_TOO_LARGE"),
          ),
        }),
      },
    );
