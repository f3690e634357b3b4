import type { TSchema } from "@sinclair/typebox";
import { ACCOUNT_SCHEMAS } from "./schemas/account.ts";
import { CHAT_SCHEMAS, ChatCompletionRequest } from "./schemas/chat.ts";
import { ERROR_SCHEMAS } from "./schemas/errors.ts";
import { TOPUP_SCHEMAS, TopupRequest } from "./schemas/topup.ts";

/**
 * The named schemas of the API (OpenAPI `components.schemas`), as plain JSON Schema (TypeBox's `Type`, not Elysia's
 * `t`, whose Integer accepts numeric strings and documents itself as `string | integer`). Request bodies here are
 * also what Elysia validates (routes name them: `body: "ChatCompletionRequest"`), so they hold no `$ref`; answers
 * may point at one another with `ref`. No `default` in a request body: Elysia would write it into the body the
 * provider gets.
 */

/** Every named schema, area by area (schemas/); the OpenAPI document lists them under components.schemas. */
export const COMPONENTS = { ...ERROR_SCHEMAS, ...CHAT_SCHEMAS, ...TOPUP_SCHEMAS, ...ACCOUNT_SCHEMAS } satisfies Record<string, TSchema>;

export type ComponentName = keyof typeof COMPONENTS;

/** The request bodies among them: self-contained, so Elysia can validate with them by name. */
export const REQUEST_BODIES = { ChatCompletionRequest, TopupRequest };
