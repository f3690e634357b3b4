/** The spend chart: one stacked bar per day, a colour per key; plain SVG, no chart library. */
import { fmtUsd } from "./dom.ts";

export interface DailyUsage {
  days: { date: string; total_charged_usdc: number; keys: { api_key_id: number; total_charged_usdc: number; request_count: number }[] }[];
}

const NS = "http://www.w3.org/2000/svg";
/** Distinguishable on white and for most colour-blind readers (Okabe–Ito). */
export const KEY_COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"];

export const keyColour = (keyIds: number[], id: number) => KEY_COLOURS[Math.max(0, keyIds.indexOf(id)) % KEY_COLOURS.length]!;

function el(tag: string, attrs: Record<string, string | number>, text?: string): SVGElement {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

/** A "nice" axis top above `max` µUSDC: 1, 2 or 5 × a power of ten. */
function niceTop(max: number): number {
  if (max <= 0) return 10_000;
  const p = 10 ** Math.floor(Math.log10(max));
  return ([1, 2, 5, 10].find((m) => m * p >= max) ?? 10) * p;
}

/** Draws the chart; `keyIds` fixes each key's colour (the order of the key list). */
export function spendChart(usage: DailyUsage, keyIds: number[]): SVGSVGElement {
  const W = 880;
  const H = 200;
  const left = 64;
  const bottom = 22;
  const top = 8;
  const plotH = H - bottom - top;
  const n = usage.days.length;
  const step = (W - left - 4) / n;
  const max = niceTop(Math.max(...usage.days.map((d) => d.total_charged_usdc)));
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "Spend per day", class: "chart" }) as SVGSVGElement;
  for (const frac of [0, 0.5, 1]) {
    const y = top + plotH * (1 - frac);
    svg.append(el("line", { x1: left, x2: W, y1: y, y2: y, class: "grid" }));
    svg.append(el("text", { x: left - 6, y: y + 4, "text-anchor": "end", class: "axis" }, fmtUsd(max * frac).replace(" USD", "")));
  }
  usage.days.forEach((d, i) => {
    const x = left + i * step + step * 0.15;
    let y = top + plotH;
    for (const k of d.keys) {
      const h = (k.total_charged_usdc / max) * plotH;
      y -= h;
      const rect = el("rect", {
        x,
        y,
        width: step * 0.7,
        height: Math.max(h, k.total_charged_usdc > 0 ? 1 : 0),
        fill: keyColour(keyIds, k.api_key_id),
      });
      rect.append(el("title", {}, `${d.date} · key #${k.api_key_id}: ${fmtUsd(k.total_charged_usdc)} (${k.request_count} requests)`));
      svg.append(rect);
    }
    // A date under the last bar and every seventh before it (the first too, if there is room) keeps the axis readable.
    if ((n - 1 - i) % 7 === 0 || (i === 0 && (n - 1) % 7 >= 3)) {
      svg.append(el("text", { x: x + step * 0.35, y: H - 6, "text-anchor": "middle", class: "axis" }, d.date.slice(5)));
    }
  });
  return svg;
}
