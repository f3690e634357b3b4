import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { SCRIPT_FILES, scriptSource } from "../src/ledger/scripts.ts";

/**
 * The SHA1 of every ledger script as shipped. Redis runs them by this SHA1 (EVALSHA), and every balance in the
 * system depends on their exact text: changing a script must be a deliberate act that updates this table.
 * Recompute with `sha1sum lua/*.lua`.
 */
const PINNED_SHA1: Record<(typeof SCRIPT_FILES)[number], string> = {
  "reserve-batch.lua": "63e4df29d51ea5dfc84c4f5dcb40bfd8ee6b2c4c",
  "settle-batch.lua": "47c439a0a4589947aacc764d4dabc0e7be5e2815",
  "release-6.lua": "a87933ec22f7c68caa763cac9416e40adf534a37",
  "credit-3.lua": "b471c2af7d2056556a6275f35829e2d113c39dab",
  "compare-and-set-1.lua": "c039c19a10d9e9734068d7e69b3398b7e4327c3a",
  "audit-3.lua": "fd267bd7390254af0c5476cc57cd57f12d025416",
  "rebuild-write-2.lua": "a75ce4ca85393513dd1ecdca58ae63e1808df470",
}

const LUA_DIR = join(import.meta.dir, "..", "lua");

const sha1 = (text: string) => new Bun.CryptoHasher("sha1").update(text).digest("hex");

/** Splits a script into its opening `--[[ ... ]]` comment and the code after it. */
function split(source: string): { header: string; code: string } {
  const m = /^--\[\[([\s\S]*?)\]\]\n/.exec(source);
  if (!m) throw new Error("script does not open with a --[[ ... ]] comment block");
  return { header: m[1]!, code: source.slice(m[0].length) };
}

const indices = (text: string, name: "KEYS" | "ARGV") => [...text.matchAll(new RegExp(`${name}\\[(\\d+)\\]`, "g"))].map((m) => Number(m[1]));

describe("ledger Lua scripts", () => {
  test("the shipped set is exactly the lua/ folder, byte for byte", () => {
    const onDisk = readdirSync(LUA_DIR).filter((f) => f.endsWith(".lua")).sort();
    expect([...SCRIPT_FILES].sort() as string[]).toEqual(onDisk);
    for (const file of SCRIPT_FILES) expect(scriptSource(file)).toBe(readFileSync(join(LUA_DIR, file), "utf8"));
  });

  test("every script's SHA1 is pinned", () => {
    const actual = Object.fromEntries(SCRIPT_FILES.map((f) => [f, sha1(scriptSource(f))]));
    expect(actual).toEqual(PINNED_SHA1);
  });

  for (const file of SCRIPT_FILES) {
    describe(file, () => {
      const source = scriptSource(file);
      // A variadic script says so in its name (`name-batch.lua`): its common keys are the documented KEYS[n].
      const variadic = file.endsWith("-batch.lua");
      const declaredKeys = variadic ? Math.max(...indices(split(source).code, "KEYS")) : Number(/-(\d+)\.lua$/.exec(file)![1]);

      test("opens with a comment block documenting KEYS, ARGV and Returns", () => {
        expect(source.startsWith("--[[\n")).toBe(true);
        const { header } = split(source);
        expect(header).toContain("KEYS[1]");
        expect(header).toContain("ARGV[1]");
        expect(header).toContain("Returns");
        if (variadic) expect(header).toContain("variadic");
      });

      test("the key count in the file name is the highest KEYS[n] the code uses, and every key is documented", () => {
        const { header, code } = split(source);
        const used = indices(code, "KEYS");
        expect(used.length).toBeGreaterThan(0);
        expect(Math.max(...used)).toBe(declaredKeys);
        // Every key 1..n is used by the code and described in the header.
        const usedSet = new Set(used);
        const documented = new Set(indices(header, "KEYS"));
        for (let n = 1; n <= declaredKeys; n++) {
          expect(usedSet.has(n)).toBe(true);
          expect(documented.has(n)).toBe(true);
        }
        expect(Math.max(...documented)).toBe(declaredKeys);
      });

      test("every ARGV the code reads is documented in the header", () => {
        const { header, code } = split(source);
        const documented = new Set(indices(header, "ARGV"));
        const used = [...new Set(indices(code, "ARGV"))].sort((a, b) => a - b);
        expect(used.length).toBeGreaterThan(0);
        expect(used.filter((n) => !documented.has(n))).toEqual([]);
      });
    });
  }
});
