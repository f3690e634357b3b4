import { formatUsd } from "../billing/money.ts";
import type { AuditPass, Difference } from "./types.ts";

/** Plain-text table: columns padded to their widest cell, numbers right-aligned. */
export function table(rows: string[][], rightAligned: boolean[]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length)));
  return rows
    .map((r) =>
      r
        .map((cell, i) => (rightAligned[i] ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!)))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}

function value(v: number | string | null, unit: Difference["unit"]): string {
  if (v === null) return "-";
  if (typeof v === "number") return unit === "usd" ? formatUsd(v) : String(v);
  return v === "" ? '""' : v;
}

function delta(x: { redis: number | string | null; expected: number | string | null; unit: Difference["unit"] }): string {
  if (typeof x.redis !== "number") return "";
  const d = x.redis - (typeof x.expected === "number" ? x.expected : 0);
  if (d === 0) return "0";
  return (d > 0 ? "+" : "") + (x.unit === "usd" ? formatUsd(d) : String(d));
}

/**
 * The audit as an operator reads it: the verdict, the differences (if any), the compared totals, and the money in
 * flight (which is not a difference). Amounts in USD with all six decimals: the books are exact to the µUSDC.
 */
export function formatAudit(a: AuditPass & { clean: boolean }): string {
  const n = a.differences.length;
  const out = [
    a.clean
      ? "audit: the books agree (Redis = Postgres + outbox)"
      : `audit: ${n} difference${n === 1 ? "" : "s"} between Redis and Postgres`,
  ];
  if (n > 0) {
    const rows = [["subject", "field", "redis", "expected", "redis - expected"]];
    for (const x of a.differences) rows.push([x.subject, x.field, value(x.redis, x.unit), value(x.expected, x.unit), delta(x)]);
    out.push("", table(rows, [false, false, true, true, true]));
  }
  const totals = [["totals", "redis", "expected", "redis - expected"]];
  for (const t of a.totals) totals.push([t.label, value(t.redis, t.unit), value(t.expected, t.unit), delta(t)]);
  out.push("", table(totals, [false, true, true, true]));
  const flight = [["in flight (not differences)", "count", "USD", ""]];
  for (const f of a.inFlight) flight.push([f.label, String(f.count), formatUsd(f.usdc), f.note ?? ""]);
  out.push("", table(flight, [false, true, true, false]));
  return out.join("\n");
}
