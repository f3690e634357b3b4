import type { StreamStep, StreamTranslator, Usage } from "../../providers/types.ts";
import { estimateUsage } from "../../billing/counted.ts";
import type { Call } from "./call.ts";

/**
 * What a metered stream has cost so far, from what its steps reported and generated: the stream charges it at its
 * end, when the client leaves and at the time cap, and the counting stays apart from the reading.
 */
export class UsageTally {
  /** The provider's final usage, once it sent it. */
  usage: Usage | undefined;
  private promptTokens: number | undefined;
  private generated = "";

  constructor(
    private readonly call: Call,
    private readonly translate: StreamTranslator,
  ) {}

  /** One translated step's counts, as they arrive. */
  count(step: StreamStep): void {
    if (step.promptTokens !== undefined) this.promptTokens = step.promptTokens;
    if (step.usage) this.usage = step.usage;
    if (step.generated) this.generated += step.generated;
  }

  // What the stream has cost so far: the provider's final usage, else its prompt count (if it gave one) or the
  // tokenizer's, plus the tokenizer's count of everything generated (text, reasoning, tool calls).
  async cost(): Promise<Usage> {
    return this.usage ?? (await estimateUsage(this.call, this.generated + (this.translate.generated?.() ?? ""), this.promptTokens));
  }

  // What a stream stopped early (time cap, client gone) has cost. A client that stopped taking output (`reading`
  // false) let the provider generate unseen, up to the hold's completion part (max_tokens clamped × n), and bill it:
  // that part is charged, never less than the provider bills and never above the hold. One that took everything
  // pays what it got.
  async stoppedCost(reading: boolean): Promise<Usage> {
    if (this.usage || reading) return this.cost();
    const counted = await estimateUsage(this.call, "", this.promptTokens);
    return { ...counted, completion_tokens: this.call.bound.completionTokens };
  }
}
