import { type Facilitator, FacilitatorUnavailable, type SettleResult, type VerifyResult, withTimeout } from "./facilitator.ts";

/**
 * A remote x402 facilitator (FACILITATOR_URL): POST /verify and /settle with
 * `{x402Version, paymentPayload, paymentRequirements}`. A network error, a timeout, a 5xx or an answer that is
 * not a verdict is "unavailable" (503 to the client); a 4xx carrying a verdict is that verdict.
 */
export class HttpFacilitator implements Facilitator {
  private readonly url: string;

  constructor(
    url: string,
    private readonly timeoutMs: number,
  ) {
    this.url = url.replace(/\/+$/, "");
  }

  verify(payload: Record<string, unknown>, requirements: Record<string, unknown>): Promise<VerifyResult> {
    return this.post<VerifyResult>("verify", payload, requirements, (b) => typeof b.isValid === "boolean");
  }

  settle(payload: Record<string, unknown>, requirements: Record<string, unknown>): Promise<SettleResult> {
    return this.post<SettleResult>("settle", payload, requirements, (b) => typeof b.success === "boolean");
  }

  private post<T>(
    path: "verify" | "settle",
    payload: Record<string, unknown>,
    requirements: Record<string, unknown>,
    isVerdict: (b: Record<string, unknown>) => boolean,
  ): Promise<T> {
    return withTimeout(this.timeoutMs, `facilitator ${path}`, async (signal) => {
      let res: Response;
      try {
        res = await fetch(`${this.url}/${path}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ x402Version: payload.x402Version, paymentPayload: payload, paymentRequirements: requirements }),
          signal,
        });
      } catch (e) {
        throw new FacilitatorUnavailable(`facilitator ${path} unreachable: ${e instanceof Error ? e.message : String(e)}`);
      }
      let body: unknown;
      try {
        body = await res.json();
      } catch {
        body = undefined;
      }
      const verdict = typeof body === "object" && body !== null && isVerdict(body as Record<string, unknown>);
      if (res.status >= 500 || !verdict) throw new FacilitatorUnavailable(`facilitator ${path} answered ${res.status} without a verdict`);
      return body as T;
    });
  }
}
