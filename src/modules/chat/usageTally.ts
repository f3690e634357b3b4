import type { CacheTokens, StreamStep, StreamTranslator, Usage } from "../../providers/types.ts";
import { billedMicro, estimateUsage, outcomeUsage } from "../../tariff/index.ts";
import type { Call } from "./call.ts";

/**
 * What a metered stream has cost so far, from what its steps reported and generated: the stream charges it at its
 * end, when the client leaves and at the time cap, and the counting stays apart from the reading.
 */
export class UsageTally {
  /** The provider's final usage, once it sent it. */
  usage: Usage | undefined;
  private promptTokens: number | undefined;
  private promptCache: CacheTokens | undefined;
  private generated = "";
  /** The charge of `usage`, worked out once (charged). */
  private priced: { usage: Usage; charge: number } | undefined;

  constructor(
    private readonly call: Call,
    private readonly translate: StreamTranslator,
  ) {}

  /** One translated step's counts, as they arrive. */
  count(step: StreamStep): void {
    if (step.promptTokens !== undefined) {
      this.promptTokens = step.promptTokens;
      this.promptCache = step.promptCache;
    }
    if (step.usage) this.usage = step.usage;
    if (step.generated) this.generated += step.generated;
  }

  /** What the provider's usage (once it came) is charged, µUSDC: the usage objects the client reads say it. */
  charged(usage: Usage): number {
    if (this.priced?.usage !== usage) this.priced = { usage, charge: billedMicro(this.call.model, usage) };
    return this.priced.charge;
  }

  // What the stream has cost so far: the provider's final usage, else its prompt count (if it gave one) or the
  // tokenizer's, plus the tokenizer's count of everything generated (text, reasoning, tool calls).
  async cost(): Promise<Usage> {
    if (this.usage) return this.usage;
    const counted = await estimateUsage(
      this.call,
      this.generated + (this.translate.generated?.() ?? ""),
      this.promptTokens,
      this.promptCache,
    );
    return outcomeUsage("counted", { counted, bound: this.call.bound })!;
  }

  // What a stream stopped early (time cap, client gone) has cost (the tariff's outcomeUsage): a client that stopped
  // taking output (`reading` false) is charged the hold's completion part, one that took everything what it got.
  async stoppedCost(outcome: "client_gone" | "time_cap", reading: boolean): Promise<Usage> {
    if (this.usage || reading) return this.cost();
    const counted = await estimateUsage(this.call, "", this.promptTokens, this.promptCache);
    return outcomeUsage(outcome, { counted, reading, bound: this.call.bound })!;
  }
}
