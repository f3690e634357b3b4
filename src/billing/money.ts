/** µUSDC per USD. */
export const MICRO = 1_000_000;

/**
 * Parses a USD amount written in decimal ("12", "0.5", "1.000001") into integer µUSDC without floats.
 * Returns null for anything else: signs, exponents, more than 6 decimals, or beyond 2^53 µUSDC.
 */
export function parseUsd(text: string): number | null {
  const m = /^(\d{1,12})(?:\.(\d{1,6}))?$/.exec(text.trim());
  if (!m) return null;
  return Number(m[1]) * MICRO + Number((m[2] ?? "").padEnd(6, "0"));
}

/** Formats µUSDC as a USD decimal string, exactly. */
export function formatUsd(micro: number): string {
  const sign = micro < 0 ? "-" : "";
  const abs = Math.abs(micro);
  return `${sign}${Math.floor(abs / MICRO)}.${String(abs % MICRO).padStart(6, "0")}`;
}
