/** Tiny DOM helpers: the page is small enough that a UI library would cost more bytes than it saves. */

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | EventListener | undefined | null>;

/** Creates an element: `h("button", { class: "primary", onclick }, "Go")`. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el: Element, children: Child[]): void {
  for (const c of children) if (c !== null && c !== undefined && c !== false) el.append(typeof c === "number" ? String(c) : c);
}

/** Replaces an element's children. */
export function fill(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, children);
}

export const $ = <T extends HTMLElement = HTMLElement>(id: string): T => document.getElementById(id) as T;

/** Shows or hides an element (the `hidden` attribute). */
export const show = (el: HTMLElement, on: boolean) => void (el.hidden = !on);

const usd = new Intl.NumberFormat("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 6 });
/** µUSDC as USD for people: "12.50", "0.000125". */
export const fmtUsd = (micro: number) => `${usd.format(micro / 1_000_000)} USD`;
export const fmtInt = (n: number) => new Intl.NumberFormat("en-US").format(n);
export const shortHex = (hex: string) => `${hex.slice(0, 6)}…${hex.slice(-4)}`;
export const fmtDate = (iso: string) => new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
export const fmtTime = (ms: number) => new Date(ms).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });

/** An amount in an asset's smallest unit, for display ("5", "2.5"). */
export function fmtUnits(atomic: bigint, decimals: number): string {
  const base = 10n ** BigInt(decimals);
  const whole = atomic / base;
  const frac = (atomic % base).toString().padStart(decimals, "0").replace(/0+$/, "");
  return frac ? `${whole}.${frac}` : String(whole);
}

/** A USD amount as the API takes it: digits with at most 6 decimals, else null. */
export function parseUsd(text: string): number | null {
  const t = text.trim();
  return /^\d+(\.\d{1,6})?$/.test(t) ? Number(t) : null;
}
