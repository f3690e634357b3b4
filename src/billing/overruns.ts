import { log } from "../log.ts";
import type { Usage } from "../providers/types.ts";
import type { ReserveBound } from "../tariff/index.ts";

/**
 * Settles above their hold since the process started. Each one is still charged (the provider billed it) but is
 * a defect of the reserve bound (holdBound.ts): counted here for /metrics, logged where it happens.
 */
const overruns = { count: 0, excessMicro: 0 };

/** How many settles exceeded their hold, and by how much in total (µUSDC), since start. */
export function holdOverruns(): { count: number; excessMicro: number } {
  return { ...overruns };
}

/**
 * Counts and logs (warn) a charge above its hold, with the request's shape and never its content, so the bound
 * that missed can be found and fixed.
 */
export function checkHoldOverrun(charge: number, bound: ReserveBound, ctx: { model: string; hold: string; usage: Usage }): void {
  if (charge <= bound.micro) return;
  overruns.count++;
  overruns.excessMicro += charge - bound.micro;
  log.warn("charge above its hold", {
    ...ctx,
    charge,
    held: bound.micro,
    bound: { prompt: bound.promptTokens, completion: bound.completionTokens },
    shape: bound.shape,
  });
}
