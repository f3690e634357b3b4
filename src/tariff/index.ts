/**
 * The tariff, in one room: pure functions of a model's prices and a request, no I/O. What a request may not carry
 * (fields.ts, parts.ts: refused before any hold, and what reaches a provider), a prompt that cannot fit
 * (promptFloor.ts), the hold that bounds what the provider can bill (hold.ts), the charge of a usage (charge.ts),
 * the usage billed when the provider reports none (counted.ts), and what each way a request ends is billed at
 * (outcomes.ts). The ledger (billing/holds.ts) moves the money;
 * this decides how much.
 */
export { billedMicro, costMicro, holdMicro, holdPromptPico, pricesFor } from "./charge.ts";
export { estimateUsage, type CountedCall } from "./counted.ts";
export { outcomeUsage, type Outcome, type OutcomeFacts } from "./outcomes.ts";
export { REFUSED_FIELDS, refuseRepricingFields, OPENAI_FORWARDED_FIELDS, pickFields } from "./fields.ts";
export { REFUSED_PART_TYPES, refuseUnboundedParts, forwardedMessages } from "./parts.ts";
export {
  DEFAULT_MAX_TOKENS,
  boundedRequest,
  completionCap,
  dearestBound,
  embeddingsBound,
  reserveFor,
  type RequestShape,
  type ReserveBound,
} from "./hold.ts";
export { promptTokensAtLeast, refuseOverlongPrompt, textTokensAtLeast } from "./promptFloor.ts";
