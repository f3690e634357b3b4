import type { Redis } from "ioredis";
import credit from "../../lua/credit-2.lua" with { type: "text" };
import release from "../../lua/release-6.lua" with { type: "text" };
import reserve from "../../lua/reserve-6.lua" with { type: "text" };
import settle from "../../lua/settle-6.lua" with { type: "text" };

// Imported as text so a compiled binary carries them; the key count comes from the `name-<numKeys>.lua` name.
const SOURCES = { "reserve-6.lua": reserve, "settle-6.lua": settle, "release-6.lua": release, "credit-2.lua": credit } as const;

/** The ledger's Lua scripts by file name. */
export const SCRIPT_FILES = Object.keys(SOURCES) as (keyof typeof SOURCES)[];

export interface LedgerScripts {
  reserve(...args: (string | number)[]): Promise<[number, number | string, number?]>;
  settle(...args: (string | number)[]): Promise<[number, number | string]>;
  release(...args: (string | number)[]): Promise<[number, number | string]>;
  credit(...args: (string | number)[]): Promise<[number, number]>;
}

/** Source of a script as shipped (tests pin its SHA1). */
export function scriptSource(file: keyof typeof SOURCES): string {
  return SOURCES[file];
}

/**
 * Registers the scripts on a connection. ioredis sends EVALSHA and falls back to EVAL on NOSCRIPT, so a
 * restarted or flushed Redis needs no reload step.
 */
export function defineScripts(redis: Redis): Redis & LedgerScripts {
  for (const file of SCRIPT_FILES) {
    const [, name, keys] = /^(\w+)-(\d+)\.lua$/.exec(file)!;
    redis.defineCommand(name!, { numberOfKeys: Number(keys), lua: scriptSource(file) });
  }
  return redis as Redis & LedgerScripts;
}
