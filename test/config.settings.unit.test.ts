/**
 * Each setting is declared once (src/config/settings.ts) and everything else agrees with that table: the docs table
 * in docs/operating.md is the one it generates, `serve --help` lists every setting, no code reads an environment
 * variable the table does not declare, and each declared default and range is the one the loader applies.
 */
import { describe, expect, test } from "bun:test";
import { Glob } from "bun";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ConfigError, loadConfig } from "../src/config.ts";
import { readSettings, SETTINGS, type Setting } from "../src/config/settings.ts";
import { DOC, withTable } from "../scripts/settings-docs.ts";
import { runCli } from "./helpers/adminCli.ts";

const ROOT = join(import.meta.dir, "..");
const settings = Object.values(SETTINGS) as Setting<unknown>[];
const names = settings.map((s) => s.name);

// Variables the processes pass each other (WORKERS's children, the background process, the embedded Postgres's
// initdb process) and the bundler's own: not settings an operator sets.
const INTERNAL = ["GATEWAY_WORKER", "GATEWAY_BACKGROUND", "GATEWAY_WORKERS_DIR", "GATEWAY_PARENT", "GATEWAY_PGLITE_INITDB", "NODE_ENV"];

test("every setting is named once", () => {
  expect(new Set(names).size).toBe(names.length);
  for (const s of settings) expect(s.doc.length).toBeGreaterThan(10);
});

test("docs/operating.md's table is the one the settings generate (bun scripts/settings-docs.ts rewrites it)", () => {
  const doc = readFileSync(DOC, "utf8");
  expect(doc).toBe(withTable(doc));
  for (const name of names) expect(doc).toContain(`| \`${name}\` |`);
});

test("serve --help lists every setting", async () => {
  const r = await runCli(["serve", "--help"], { cwd: ROOT });
  expect(r.code).toBe(0);
  const listed = [...r.stdout.matchAll(/^ {4}([A-Za-z][A-Za-z0-9_]+) /gm)].map((m) => m[1]);
  expect(listed.sort()).toEqual([...names].sort());
});

test("no source reads an environment variable the table does not declare", () => {
  const read = new Map<string, string>();
  for (const file of new Glob("src/**/*.ts").scanSync(ROOT)) {
    if (file === "src/config/settings.ts") continue;
    const text = readFileSync(join(ROOT, file), "utf8");
    const patterns = [
      /\benv\??\.([A-Z][A-Za-z0-9_]+)/g, // env.PORT, process.env.LOG_LEVEL
      /\benv\[\s*["']([A-Z][A-Za-z0-9_]+)["']\s*\]/g, // env["PORT"]
      /\b(?:int|oneOf|url)\(\s*env,\s*["']([A-Z][A-Za-z0-9_]+)["']/g, // the readers of config/env.ts
      /\bconst [A-Z_]+_ENV = ["']([A-Za-z][A-Za-z0-9_]+)["']/g, // a variable's name kept in a constant
    ];
    for (const re of patterns) for (const m of text.matchAll(re)) read.set(m[1]!, file);
  }
  const undeclared = [...read].filter(([name]) => !names.includes(name) && !INTERNAL.includes(name));
  expect(undeclared).toEqual([]);
  expect(read.size).toBeGreaterThan(5); // the scan sees the reads it is meant to see
});

describe("the loader applies each declared default and range", () => {
  const literal = settings.filter((s) => /^(\d+|[a-z.\/*0-9-]+)$/i.test(s.default) && s.default !== "unset");

  test.each(literal.map((s) => [s.name, s.default] as const))("%s: unset reads as its default %s", (name, dflt) => {
    expect(readSettings({ [name]: dflt })).toEqual(readSettings({}));
    expect(loadConfig({ [name]: dflt })).toEqual(loadConfig({}));
  });

  const ranged = settings.filter((s) => s.range && /^\d+–\d+$/.test(s.range));
  test.each(ranged.map((s) => [s.name, s.range!] as const))("%s: %s, and one past either end is refused naming it", (name, range) => {
    const [min, max] = range.split("–").map(Number) as [number, number];
    for (const ok of [min, max]) expect(() => readSettings({ [name]: String(ok) })).not.toThrow();
    for (const bad of [max + 1, ...(min > 0 ? [min - 1] : [])]) {
      let caught: unknown;
      try {
        readSettings({ [name]: String(bad) });
      } catch (e) {
        caught = e;
      }
      expect(caught).toBeInstanceOf(ConfigError);
      expect((caught as ConfigError).variable).toBe(name);
    }
  });

  test.each(settings.filter((s) => s.type.includes("\\|")).map((s) => [s.name, s.type] as const))("%s: only %s", (name, type) => {
    const values = type.split(" \\| ").filter((v) => /^[a-z0-9-]+$/.test(v) && v !== "integer");
    for (const v of values) expect(() => readSettings({ [name]: v })).not.toThrow();
    expect(() => readSettings({ [name]: "no-such-value" })).toThrow(ConfigError);
  });
});
