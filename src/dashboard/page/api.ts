/**
 * The gateway's API as the page calls it, and every answer it can fail with put in words a wallet owner
 * understands. Pure apart from fetch, so tests call `explain` directly.
 */

/** A failed call: HTTP status (0 when the gateway could not be reached), the spec's code and the body. */
export class ApiFailure extends Error {
  constructor(
    readonly status: number,
    readonly body: Record<string, unknown>,
    readonly retryAfterS?: number,
  ) {
    super(`HTTP ${status}`);
  }
  get code(): string | undefined {
    return typeof this.body.error === "string" && typeof this.body.message === "string" ? this.body.error : undefined;
  }
}

/** Server clock minus ours (ms), from the Date header; SIWE times are judged by the server's clock. */
export let clockOffsetMs = 0;

/** Fetches JSON from the gateway; throws ApiFailure on anything but 2xx (402 too: callers that expect it catch it). */
export async function api<T>(path: string, init: RequestInit = {}): Promise<{ body: T; headers: Headers }> {
  let res: Response;
  try {
    res = await fetch(path, { ...init, headers: { "content-type": "application/json", ...init.headers } });
  } catch {
    throw new ApiFailure(0, {});
  }
  const date = Date.parse(res.headers.get("date") ?? "");
  // The header has whole seconds: only a clearly wrong local clock is corrected.
  if (!Number.isNaN(date)) clockOffsetMs = Math.abs(date - Date.now()) > 5_000 ? date - Date.now() : 0;
  let body: Record<string, unknown> = {};
  try {
    body = await res.json();
  } catch {
    // not JSON (a proxy's page): the status speaks
  }
  if (!res.ok) {
    const retry = Number(res.headers.get("retry-after"));
    throw new ApiFailure(res.status, body, Number.isFinite(retry) && retry > 0 ? retry : undefined);
  }
  return { body: body as T, headers: res.headers };
}

/** What the page was doing, so an answer is explained in its context. */
export type Doing = "read" | "create-key" | "revoke-key" | "topup" | "sign-in" | "lookup";

/** Reasons a facilitator gives for refusing a payment (x402's names), in words. */
const PAYMENT_REASONS: [RegExp, string][] = [
  [/insufficient_funds|insufficient.balance|exceeds balance/i, "your wallet does not hold enough of this token"],
  [/valid_before|validbefore|expired|deadline/i, "the signed payment expired before it reached the chain"],
  [/valid_after|validafter/i, "the signed payment is not valid yet (is your computer's clock right?)"],
  [/signature/i, "the wallet's signature does not match the payment (was it signed on another network?)"],
  [/nonce|authorization_used|already used/i, "this payment authorization was used already"],
  [/network|chain/i, "the payment was signed for another network"],
];

/** The sentence the page shows for a failed call (or a wallet error) while doing `doing`. */
export function explain(e: unknown, doing: Doing, ctx: { network?: string; asset?: string; sessionMinutes?: number } = {}): string {
  const walletCode = (e as { code?: unknown })?.code ?? (e as { cause?: { code?: unknown } })?.cause?.code;
  if (!(e instanceof ApiFailure)) {
    if (walletCode === 4001) return "You declined the request in your wallet. Nothing was changed.";
    if (walletCode === 4902)
      return `Your wallet does not know the ${ctx.network ?? "payment"} network yet. Add it in your wallet, then try again.`;
    if (walletCode === -32002) return "Your wallet already has a request waiting. Open the wallet to answer it.";
    if (walletCode === 4100) return "The wallet has not allowed this site yet. Connect again and approve it.";
    const text = e instanceof Error ? e.message.split("\n")[0]! : String(e);
    // An EIP-1193 error carries a numeric code; anything else is the page's own finding, said as it is.
    return typeof walletCode === "number" ? `The wallet reported a problem: ${text}` : `${text.charAt(0).toUpperCase()}${text.slice(1)}.`;
  }
  const message = typeof e.body.message === "string" ? e.body.message : undefined;
  const plain = typeof e.body.error === "string" ? e.body.error : undefined;
  const wait = e.retryAfterS ? `in ${e.retryAfterS} second${e.retryAfterS === 1 ? "" : "s"}` : "in a moment";
  switch (e.status) {
    case 0:
      return "The gateway cannot be reached. Check your connection (or, on your own machine, that the gateway is still running) and try again.";
    case 400:
      if (doing === "topup" && !message) {
        return `The gateway did not accept this payment (${plain ?? "malformed"}). Nothing was charged; try again.`;
      }
      return `The gateway did not accept the request: ${message ?? plain ?? "invalid parameters"}.`;
    case 401:
      if (doing === "lookup")
        return "This API key is not an active key of this wallet (mistyped, revoked, or another wallet's). Check both, or leave the key out to see the available credit only.";
      if (doing === "sign-in") {
        // The gateway names the rule the message broke (never the message itself): worth showing here.
        return `The gateway did not accept the sign-in${message ? ` (${message})` : ""}. Check your computer's clock and that the wallet signed for this site, then try again.`;
      }
      return `Your sign-in has run out or was not accepted (a sign-in lasts ${ctx.sessionMinutes ?? 10} minutes, and each change needs a fresh signature). Sign in again to continue; nothing was changed.`;
    case 402:
      if (e.code === "INSUFFICIENT_BALANCE") return "Your credit is too low for this request. Top up to continue.";
      if (e.code === "KEY_BUDGET_EXCEEDED") return "This API key has used up its budget. Create a key with a larger budget.";
      if (doing === "topup") {
        const reason = plain ?? "unknown reason";
        const found = PAYMENT_REASONS.find(([re]) => re.test(reason));
        return `The payment was refused: ${found ? found[1] : reason}. Nothing was charged${ctx.asset ? ` (check your ${ctx.asset} on ${ctx.network ?? "the network"})` : ""}.`;
      }
      return "Payment is required for this request. Top up your credit to continue.";
    case 404:
      if (doing === "revoke-key") return "That key does not exist for this wallet any more. The list is refreshed.";
      return "The gateway does not know this page or resource. Is it an older or newer version?";
    case 429:
      if (e.code === "UPSTREAM_CLIENT_ERROR") return `The model provider is limiting requests. Try again ${wait}.`;
      return `Too many requests from this wallet. Try again ${wait}.`;
    case 503:
      if (doing === "topup") {
        if (/not configured/i.test(plain ?? "")) return "Top-ups are not enabled on this gateway. Ask its operator.";
        if (/no accepted asset/i.test(plain ?? "")) return "No accepted token can carry this exact amount. Try a rounder amount.";
        return "The payment service (facilitator) cannot be reached right now. If you signed a payment, the gateway checks the chain and credits it by itself once it went through; otherwise nothing was taken. Try again in a few minutes.";
      }
      return `The gateway is temporarily unavailable. Try again ${wait}.`;
    case 502:
    case 504:
      return "The model provider did not answer properly. Nothing was charged for it.";
    default:
      if (e.status >= 500)
        return `The gateway hit an internal error (HTTP ${e.status}). Refresh to see whether anything changed, then try again ${wait}.`;
      return `The gateway answered HTTP ${e.status}${message ? `: ${message}` : ""}.`;
  }
}
