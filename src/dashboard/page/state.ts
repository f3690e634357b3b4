/**
 * What every part of the dashboard shares: the server's config, the connected wallet and the session, the
 * error lines, and the busy buttons. One mutable object, so the parts see one wallet and one session.
 */
import type { PageConfig } from "../pageConfig.ts";
import { ApiFailure, type Doing, explain } from "./api.ts";
import { $, fmtTime, show } from "./dom.ts";
import { forgetSession, type Session, signIn } from "./session.ts";
import type { ConnectedWallet } from "./wallet.ts";

/** The deployment as the server told it, inlined in the HTML. */
export const cfg = JSON.parse($("gw-config").textContent!) as PageConfig;
export const sessionMinutes = Math.round(cfg.siwe.maxAgeS / 60);

/** The connected wallet (null until one connects) and its sign-in (null when signed out). */
export const state: { wallet: ConnectedWallet | null; session: Session | null } = { wallet: null, session: null };

/** Shows `e` explained in words in the error line `id` (or clears it). */
export function report(id: string, e?: unknown, doing: Doing = "read", asset?: string): void {
  const el = $(id);
  const text = e === undefined ? "" : explain(e, doing, { network: cfg.network.name, asset, sessionMinutes });
  // A refused session is told where the sign-in button is, whatever was being done.
  const signInAgain = e instanceof ApiFailure && e.status === 401 && doing !== "sign-in";
  show(el, e !== undefined && !signInAgain);
  el.textContent = signInAgain ? "" : text;
  if (signInAgain) endSession(text);
}

/**
 * A guard for a read that may run twice at once (a change's own refresh beside a Refresh click): each call of the
 * returned function starts a read and gives back `isNewest`, so a slow older answer never paints over a newer one.
 */
export function newestOnly(): () => () => boolean {
  let started = 0;
  return () => {
    const mine = ++started;
    return () => mine === started;
  };
}

/** Runs `f` with `button` disabled, so a double click never signs or pays twice. */
export async function busy(button: HTMLButtonElement, f: () => Promise<void>): Promise<void> {
  button.disabled = true;
  try {
    await f();
  } finally {
    button.disabled = false;
  }
}

/** Shows the private parts when signed in, the sign-in box (with `why`, if given) when not. */
export function renderSession(why?: string): void {
  const signedIn = state.session !== null;
  for (const el of Array.from(document.querySelectorAll<HTMLElement>(".private"))) show(el, signedIn);
  show($("signin-box"), !signedIn);
  if (why) $("signin-text").textContent = why;
  if (state.session)
    $("session-line").textContent =
      `Signed in until ${fmtTime(state.session.expiresAt)}. Reading needs no new signature until then; each key change asks for one.`;
}

/** Drops the session (ran out, or the server refused it): the private parts hide until the next sign-in. */
export function endSession(why: string): void {
  if (state.wallet) forgetSession(state.wallet.address);
  state.session = null;
  renderSession(why);
}

/** Signs a fresh message for `action` (each change needs one); it becomes the session for reading too. */
export async function sign(action: string): Promise<Session> {
  const session = await signIn(state.wallet!, cfg.siwe, action);
  state.session = session;
  renderSession();
  return session;
}
