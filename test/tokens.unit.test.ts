/**
 * The tokenizer's pieces (providers/tokens.ts): together they are the text, none is long, no long run stays whole,
 * no surrogate pair is split; text of ordinary words is counted exactly as one call of the tokenizer counts it, and a
 * long run is counted at least as high.
 */
import { describe, expect, test } from "bun:test";
import { countTokens as exactCount } from "gpt-tokenizer/encoding/o200k_base";
import { countTokens, tokenizerPieces } from "../src/providers/tokens.ts";

const exact = (s: string) => exactCount(s, { disallowedSpecial: new Set<string>() });
const PROSE = "The quick brown fox jumps over the lazy dog, and 12,345 numbers.\nZürich, Kraków 🚀 — done.  Two  spaces.\n".repeat(400);

describe("tokenizer pieces", () => {
  for (const [name, text] of [
    ["prose", PROSE],
    ["one long word", "x".repeat(10_000)],
    ["emoji", "🚀".repeat(5_000)],
    ["unspaced CJK", "漢字かな交じり文".repeat(1_000)],
    ["spaces", " ".repeat(9_000) + "a" + "\n".repeat(300)],
    ["mixed", `${"y".repeat(70)} ${"🚀".repeat(40)}x ${PROSE.slice(0, 5000)}${"z".repeat(4_200)}`],
  ] as const) {
    test(`${name}: joined they are the text; each at most 4,096 characters, no run over 64, no pair split`, () => {
      const pieces = [...tokenizerPieces(text)];
      expect(pieces.join("")).toBe(text);
      for (const p of pieces) {
        expect(p.length).toBeLessThanOrEqual(4096);
        expect(/\S{65}|\s{65}/.test(p)).toBe(false);
        expect(/^[\udc00-\udfff]|[\ud800-\udbff]$/.test(p)).toBe(false);
      }
    });
  }

  test("ordinary text is counted exactly; a long run at least as high as one call of the tokenizer counts it", async () => {
    expect(await countTokens(PROSE)).toBe(exact(PROSE));
    for (const run of ["x".repeat(3_000), "漢字かな交じり文".repeat(300), "🚀".repeat(1_500)]) {
      const counted = await countTokens(run);
      expect(counted).toBeGreaterThanOrEqual(exact(run));
      expect(counted).toBeLessThanOrEqual(exact(run) * 1.05 + 2);
    }
  });
});
