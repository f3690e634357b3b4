/**
 * The layout rules docs/design.md states ("Where things are"), checked on the source so they stay true: imports run down the floors,
 * no file under src/ grows past ~320 formatted lines, every Redis key name lives in ledger/names.ts, and each id format
 * and shared check is written once. Reads files only; nothing is started.
 */
import { describe, expect, test } from "bun:test";
import { Glob } from "bun";
import { readFileSync } from "node:fs";
import { dirname, join, normalize, relative } from "node:path";

const SRC = join(import.meta.dir, "..", "src");
// Counted as Prettier lays the code out (140 columns): about what 250 lines were before the formatter wrapped them.
const MAX_LINES = 320;

const files = [...new Glob("**/*.ts").scanSync(SRC)].sort();
const text = new Map(files.map((f) => [f, readFileSync(join(SRC, f), "utf8")]));

/**
 * The floors, top first (docs/design.md, "Where things are"). A file may import its own floor or any below it, never one above.
 * The first matching rule decides, so the routes inside modules/ are told apart from their services.
 */
const FLOORS: [floor: string, matches: (file: string) => boolean][] = [
  [
    "composition root",
    (f) =>
      ["main.ts", "heapHint.ts", "cli.ts", "app.ts", "wiring.ts", "stack.ts", "startup.ts", "workers.ts"].includes(f) ||
      f.startsWith("admin/"),
  ],
  [
    "routes",
    (f) =>
      /^modules\/[^/]+\/[^/]+\.routes\.ts$/.test(f) ||
      f.startsWith("dashboard/") ||
      f.startsWith("openapi/") ||
      f === "cors.ts" ||
      f === "requestBody.ts",
  ],
  ["services", (f) => f.startsWith("modules/") || f.startsWith("auth/")],
  ["config", (f) => f === "config.ts" || f.startsWith("config/")],
  ["billing, rebuild, audit", (f) => /^(billing|rebuild|audit)\//.test(f)],
  ["ledger, providers, tariff, payments, store", (f) => /^(ledger|providers|tariff|payments|store|embedded)\//.test(f)],
  ["redis clients", (f) => f.startsWith("redis/")],
  ["base", (f) => ["errors.ts", "log.ts", "outage.ts", "deadline.ts", "assets.d.ts"].includes(f) || f.startsWith("observe/")],
];

function floorOf(file: string): number {
  const i = FLOORS.findIndex(([, matches]) => matches(file));
  if (i === -1) throw new Error(`src/${file} is on no floor: add it to FLOORS (and docs/design.md's floors)`);
  return i;
}

/** The src/ files a file imports (static, re-exported, side-effect and dynamic), as paths under src/. */
function importsOf(file: string): string[] {
  const specifiers = [...text.get(file)!.matchAll(/(?:\bfrom\s*|\bimport\s*\(?\s*)["'](\.{1,2}\/[^"']+)["']/g)].map((m) => m[1]!);
  return specifiers
    .map((s) => relative(SRC, normalize(join(SRC, dirname(file), s))))
    .filter((p) => p.endsWith(".ts") && !p.startsWith(".."));
}

/**
 * Test files are named `<area>[.<topic>].<kind>.test.ts`, so a reader finds a scenario by what it exercises:
 * happy (the contract served), error (failures and bad input, what the caller and the books see), security
 * (attacks, greed and money under concurrency), unit (pure code, no service), model (seeded reference-model runs).
 */
const TEST_NAME = /^[a-z0-9]+(\.[a-z0-9]+)?\.(happy|error|security|unit|model)\.test\.ts$/;

describe("the tests' names", () => {
  test("every test file says its area and its kind", () => {
    const tests = [...new Glob("*.test.ts").scanSync(import.meta.dir)].sort();
    expect(tests.length).toBeGreaterThan(40);
    expect(tests.filter((f) => !TEST_NAME.test(f))).toEqual([]);
  });
});

describe("the source's layout", () => {
  test("sees the source (a glob that found nothing would pass everything below)", () => {
    expect(files.length).toBeGreaterThan(50);
    expect(importsOf("wiring.ts")).toContain("ledger/ledger.ts");
  });

  test("every file sits on a floor, and no import runs up a floor", () => {
    const upward: string[] = [];
    for (const f of files) {
      for (const target of importsOf(f)) {
        if (floorOf(target) < floorOf(f))
          upward.push(`src/${f} (${FLOORS[floorOf(f)]![0]}) imports src/${target} (${FLOORS[floorOf(target)]![0]})`);
      }
    }
    expect(upward).toEqual([]);
  });

  test("no import circle, type imports included (a circle makes two files one room with two doors)", () => {
    const circles: string[] = [];
    const state = new Map<string, "open" | "done">();
    const visit = (f: string, path: string[]) => {
      if (state.get(f) === "done") return;
      if (state.get(f) === "open") return void circles.push([...path.slice(path.indexOf(f)), f].join(" → "));
      state.set(f, "open");
      for (const t of importsOf(f)) if (text.has(t)) visit(t, [...path, f]);
      state.set(f, "done");
    };
    for (const f of files) visit(f, []);
    expect(circles).toEqual([]);
  });

  test(`no file under src/ is over ${MAX_LINES} lines`, () => {
    const long = files
      .map((f) => ({ f, lines: text.get(f)!.replace(/\n$/, "").split("\n").length }))
      .filter(({ lines }) => lines > MAX_LINES)
      .map(({ f, lines }) => `src/${f}: ${lines} lines`);
    expect(long).toEqual([]);
  });

  test("Redis key names (gw:…) are written only in src/ledger/names.ts", () => {
    const elsewhere: string[] = [];
    for (const f of files) {
      if (f === "ledger/names.ts") continue;
      text
        .get(f)!
        .split("\n")
        .forEach((line, i) => {
          const t = line.trim();
          // Comments may name a key for the reader; code (strings, templates, regexes) may not spell one.
          if (t.startsWith("*") || t.startsWith("//") || t.startsWith("/*")) return;
          if (line.includes("gw:")) elsewhere.push(`src/${f}:${i + 1}: ${t}`);
        });
    }
    expect(elsewhere).toEqual([]);
    expect(text.get("ledger/names.ts")).toContain('"gw:ledger:ready"');
  });

  test("each id format and each shared check is written once", () => {
    // A second place that builds one of these ids could drift from the first, and an idempotent credit would
    // then be applied twice under two spellings.
    const once = ["`topup:${", "`grant:${", "`redeem:${", "`${type}:${hold}`", "e.type || ':' || e.hold", "mutually exclusive"];
    for (const s of once) {
      const places = files.flatMap((f) =>
        text
          .get(f)!
          .split("\n")
          .flatMap((line, i) => (line.includes(s) ? [`src/${f}:${i + 1}`] : [])),
      );
      expect({ [s]: places }).toEqual({ [s]: [places[0]!] });
    }
  });
});
