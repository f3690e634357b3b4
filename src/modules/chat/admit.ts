import type { ApiKeyAuth } from "../../auth/apiKeys.ts";
import { assertModelAllowed } from "../../auth/keyLimits.ts";
import { refuseOverlongPrompt } from "../../tariff/index.ts";
import { ApiError } from "../../errors.ts";
import type { KeyPrincipal } from "../../ledger/ledger.ts";
import type { RequestTrace } from "../../observe/trace.ts";
import { type Catalog, findModel, KIND_ENDPOINT, type Model, type ModelKind, unknownModelReason } from "../../providers/catalog.ts";
import { refuseRepricingFields } from "../../tariff/index.ts";
import type { ChatRequest } from "../../providers/types.ts";

/** A request admitted: who calls (none yet for a call without a key), and the catalog model it asked for. */
export interface Admitted {
  principal?: KeyPrincipal;
  model: Model;
}

/**
 * Who calls, with which model: every check made before a hold, in the order a client meets them. A field that could
 * raise the bill behind the hold is refused first (docs/design.md "Money rules"), then the key, then the model (and
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
): Promise<Admitted> {
  refuseRepricingFields(body);
  const admitted = await admitModel(auth, catalog, authorization, body.model, "chat", trace);
  refuseOverlongPrompt(admitted.model, body);
  return admitted;
}

/**
 * The checks every model endpoint shares: the key, the model (served, of the endpoint's kind: another kind is 400
 * naming its endpoint), and whether the key may call it.
 */
export async function admitModel(
  auth: ApiKeyAuth,
  catalog: Catalog,
  authorization: string | null | undefined,
  id: unknown,
  kind: ModelKind,
  trace: RequestTrace,
): Promise<Admitted> {
  // undefined: a call without a key, whose payer is known only once its hold is (ChatService's Payer).
  const principal = authorization === undefined ? undefined : await auth.fromHeader(authorization);
  trace.model = String(id).slice(0, 200);
  const model = typeof id === "string" ? findModel(catalog, id) : undefined;
  if (!model) throw new ApiError({ code: "UNKNOWN_MODEL", message: unknownModelReason(catalog, String(id)) });
  if (model.kind !== kind) {
    throw new ApiError({
      code: "VALIDATION_ERROR",
      message: `Model ${JSON.stringify(model.id)} is a${model.kind === "embedding" ? "n embedding" : " chat"} model: call it on ${KIND_ENDPOINT[model.kind]}`,
    });
  }
  assertModelAllowed(principal?.limits, model.id);
  return { principal, model };
}
