import type { ApiKeyAuth } from "../../auth/apiKeys.ts";
import { assertModelAllowed } from "../../auth/keyLimits.ts";
import { refuseOverlongPrompt } from "../../tariff/index.ts";
import { ApiError } from "../../errors.ts";
import type { KeyPrincipal } from "../../ledger/ledger.ts";
import type { RequestTrace } from "../../observe/trace.ts";
import { type Catalog, findModel, type Model, unknownModelReason } from "../../providers/catalog.ts";
import { refuseRepricingFields } from "../../tariff/index.ts";
import type { ChatRequest } from "../../providers/types.ts";

/**
 * Who calls, with which model: every check made before a hold, in the order a client meets them. A field that could
 * raise the bill behind the hold is refused first (README "Money rules"), then the key, then the model (and
 * whether the key may call it: 403 MODEL_NOT_ALLOWED); a prompt
 * that cannot fit the model's context is 400 here, before the hold (whose prompt bound stops at the window) could
 * make it a 402. A call without a key (`authorization` undefined) gets the same checks, bar the key.
 */
export async function admit(
  auth: ApiKeyAuth,
  catalog: Catalog,
  authorization: string | null | undefined,
  body: ChatRequest,
  trace: RequestTrace,
): Promise<{ principal?: KeyPrincipal; model: Model }> {
  refuseRepricingFields(body);
  // undefined: a call without a key, whose payer is known only once its hold is (ChatService's Payer).
  const principal = authorization === undefined ? undefined : await auth.fromHeader(authorization);
  trace.model = String(body.model).slice(0, 200);
  const model = findModel(catalog, body.model);
  if (!model) throw new ApiError({ code: "UNKNOWN_MODEL", message: unknownModelReason(catalog, String(body.model)) });
  assertModelAllowed(principal?.limits, model.id);
  refuseOverlongPrompt(model, body);
  return { principal, model };
}
