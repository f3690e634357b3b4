/**
 * Charges are ceil(tokens × pico-USD price / 1e6) µUSDC, exact for any size: the double fast path must agree with
 * a BigInt reference everywhere, including where products pass 2^53.
 */
import { describe, expect, test } from "bun:test";
import type { Model } from "../src/providers/catalog.ts";
import { billedMicro, costMicro } from "../src/tariff/index.ts";

function reference(pt: number, pp: number, ct: number, cp: number): number {
  const pico = BigInt(pt) * BigInt(pp) + BigInt(ct) * BigInt(cp);
  return Number((pico + 999_999n) / 1_000_000n);
}

// Mulberry32: a seeded generator, so a failure names inputs that reproduce.
function rng(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const model = (pp: number, cp: number) => ({ promptPico: pp, completionPico: cp, costPromptPico: pp, costCompletionPico: cp }) as Model;

describe("pricing", () => {
  test("exact rounding up at the µUSDC boundary", () => {
    const m = model(2_500_000, 10_000_000); // 2.5 and 10 USD per 1M tokens
    expect(billedMicro(m, { prompt_tokens: 0, completion_tokens: 0 })).toBe(0);
    expect(billedMicro(m, { prompt_tokens: 1, completion_tokens: 0 })).toBe(3); // 2.5 → 3
    expect(billedMicro(m, { prompt_tokens: 2, completion_tokens: 0 })).toBe(5);
    expect(billedMicro(m, { prompt_tokens: 11, completion_tokens: 5 })).toBe(78); // 27.5 + 50 → 78
    expect(costMicro(model(1, 0), { prompt_tokens: 1, completion_tokens: 0 })).toBe(1);
  });

  test("products beyond 2^53 are still exact", () => {
    const m = model(999_999_999_999, 999_999_999_999); // ~1M USD per 1M tokens
    const u = { prompt_tokens: 10_000_000, completion_tokens: 9_999_999 };
    expect(billedMicro(m, u)).toBe(reference(u.prompt_tokens, 999_999_999_999, u.completion_tokens, 999_999_999_999));
  });

  test("10,000 seeded random cases agree with the BigInt reference", () => {
    const r = rng(20261123);
    for (let i = 0; i < 10_000; i++) {
      const scale = 10 ** Math.floor(r() * 13); // prices from 1 pico to ~1e12 pico per token
      const pp = Math.floor(r() * scale);
      const cp = Math.floor(r() * scale);
      const pt = Math.floor(r() * 10 ** Math.floor(r() * 8));
      const ct = Math.floor(r() * 10 ** Math.floor(r() * 8));
      const got = billedMicro(model(pp, cp), { prompt_tokens: pt, completion_tokens: ct });
      if (got !== reference(pt, pp, ct, cp)) throw new Error(`mismatch for pt=${pt} pp=${pp} ct=${ct} cp=${cp}: ${got}`);
    }
  });
});
