import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Redis } from "ioredis";

const LUA_DIR = join(import.meta.dir, "../../lua");

/** The ledger's Lua scripts by name; the key count is read from the `name-<numKeys>.lua` file name. */
export const SCRIPT_FILES = ["reserve-6.lua", "settle-6.lua", "release-6.lua", "credit-2.lua"] as const;

export interface LedgerScripts {
  reserve(...args: (string | number)[]): Promise<[number, number | string, number?]>;
  settle(...args: (string | number)[]): Promise<[number, number | string]>;
  release(...args: (string | number)[]): Promise<[number, number | string]>;
  credit(...args: (string | number)[]): Promise<[number, number]>;
}

/** Source of a script as shipped (tests pin its SHA1). */
export function scriptSource(file: string): string {
  return readFileSync(join(LUA_DIR, file), "utf8");
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
