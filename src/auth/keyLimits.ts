import { ApiError } from "../errors.ts";
import type { KeyLimits } from "../ledger/ledger.ts";
import type { Catalog } from "../providers/catalog.ts";

/**
 * A key's model allow-list (POST /v1/auth/keys `models`): catalog ids, or "<provider>/*" for every model of a
 * provider. Checked at admission, before any hold, on every model endpoint; GET /v1/models lists what it allows.
 */

/** Whether a key with these limits may call catalog model `id` (no limits, or no list: any model). */
export function modelAllowed(limits: KeyLimits | undefined, id: string): boolean {
  const models = limits?.models;
  if (!models) return true;
  for (const m of models) {
    if (m === id) return true;
    if (m.endsWith("/*") && id.startsWith(m.slice(0, -1))) return true;
  }
  return false;
}

/** 403 MODEL_NOT_ALLOWED unless the key may call `id`. */
export function assertModelAllowed(limits: KeyLimits | undefined, id: string): void {
  if (!modelAllowed(limits, id)) {
    throw new ApiError({ code: "MODEL_NOT_ALLOWED", message: `This API key may not call model ${JSON.stringify(id.slice(0, 200))}` });
  }
}

/**
 * A new key's `models`, checked against the catalog: each entry a catalog id (served or not: its provider may be
 * configured later) or "<provider>/*" of a catalog provider. 400 VALIDATION_ERROR naming the first that is neither.
 */
export function checkKeyModels(models: readonly string[], catalog: Catalog): void {
  const providers = new Set(catalog.providers.map((p) => p.name));
  for (const m of models) {
    const known = m.endsWith("/*") ? providers.has(m.slice(0, -2)) : catalog.models.has(m) || catalog.disabled.has(m);
    if (!known) {
      throw new ApiError({
        code: "VALIDATION_ERROR",
        message: `models: ${JSON.stringify(m.slice(0, 200))} is neither a catalog model id nor "<provider>/*" of a catalog provider`,
      });
    }
  }
}
