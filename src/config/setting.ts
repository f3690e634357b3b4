/**
 * What a setting is (its variable, type, default, range, one line of doc, and its reader) and the kinds of setting
 * the table in settings.ts is made of; the docs table and the --help lines are rendered from the rows here.
 */
import { ConfigError } from "../errors.ts";
import { type Env, int, oneOf, url } from "./env.ts";

/** One setting: what the docs and --help show, and its reader (which throws ConfigError naming it). */
export interface Setting<T> {
  name: string;
  /** The section of the docs table and of --help. */
  group: "server" | "storage" | "models" | "sign-in" | "limits" | "scaling" | "payments";
  type: string;
  /** As shown; "unset" when the setting has no value unless given. */
  default: string;
  range?: string;
  doc: string;
  read(env: Env): T;
}

export type Group = Setting<unknown>["group"];

export const whole = (
  name: string,
  group: Group,
  fallback: number,
  min: number,
  max: number,
  doc: string,
  shown?: string,
): Setting<number> => ({
  name,
  group,
  type: "integer",
  default: shown ?? String(fallback),
  range: `${min}–${max}`,
  doc,
  read: (env) => int(env, name, fallback, min, max),
});

/** A whole number whose default depends on another setting: undefined when unset (config.ts applies the default). */
export const wholeOrUnset = (
  name: string,
  group: Group,
  min: number,
  max: number,
  doc: string,
  shown: string,
): Setting<number | undefined> => ({
  name,
  group,
  type: "integer",
  default: shown,
  range: `${min}–${max}`,
  doc,
  read: (env) => (env[name] ? int(env, name, 0, min, max) : undefined),
});

/** A whole number in range, or "auto" (config.ts turns it into a count). */
export const wholeOrAuto = (
  name: string,
  group: Group,
  fallback: number,
  min: number,
  max: number,
  doc: string,
): Setting<number | "auto"> => ({
  name,
  group,
  type: 'integer \\| "auto"',
  default: String(fallback),
  range: `${min}–${max}`,
  doc,
  read: (env) => {
    const raw = env[name];
    if (raw === "auto") return "auto";
    if (raw && !/^\d+$/.test(raw)) throw new ConfigError(name, `must be a whole number or "auto", got "${raw}"`);
    return int(env, name, fallback, min, max);
  },
});

export const choice = <T extends string>(name: string, group: Group, values: readonly T[], fallback: T, doc: string): Setting<T> => ({
  name,
  group,
  type: values.join(" \\| "),
  default: fallback,
  doc,
  read: (env) => oneOf(env, name, values, fallback),
});

export const link = (name: string, group: Group, protocols: string[], doc: string, shown = "unset"): Setting<string | undefined> => ({
  name,
  group,
  type: `URL (${protocols.map((p) => p.slice(0, -1)).join(", ")})`,
  default: shown,
  doc,
  read: (env) => url(env, name, protocols),
});

/** Free text with a default; empty counts as unset. */
export const text = (name: string, group: Group, type: string, fallback: string, doc: string): Setting<string> => ({
  name,
  group,
  type,
  default: fallback,
  doc,
  read: (env) => env[name] || fallback,
});

/** Free text, unset unless given (empty counts as unset); `shown`: what the docs say happens then. */
export const optionalText = (name: string, group: Group, type: string, doc: string, shown = "unset"): Setting<string | undefined> => ({
  name,
  group,
  type,
  default: shown,
  doc,
  read: (env) => env[name] || undefined,
});

const GROUPS: Group[] = ["server", "storage", "models", "sign-in", "limits", "scaling", "payments"];

/** The docs table (docs/operating.md, Configuration), one row per setting, by group. */
export function renderTable(rows: Setting<unknown>[]): string {
  const lines = ["| variable | type | default | range | meaning |", "|---|---|---|---|---|"];
  for (const group of GROUPS)
    for (const s of rows.filter((r) => r.group === group))
      lines.push(`| \`${s.name}\` | ${s.type} | ${s.default} | ${s.range ?? ""} | ${group}: ${s.doc} |`);
  return lines.join("\n");
}

/** The settings part of `serve --help`: one line per setting, by group. */
export function renderHelp(rows: Setting<unknown>[]): string {
  const out: string[] = [];
  for (const group of GROUPS) {
    out.push(`  ${group}:`);
    for (const s of rows.filter((r) => r.group === group)) {
      const dflt = s.default === "unset" ? "" : ` (default ${s.default.replaceAll("\\|", "|")})`;
      out.push(`    ${s.name.padEnd(38)} ${s.doc}${dflt}`);
    }
  }
  return out.join("\n");
}
