/**
 * The readers every setting is parsed with (a whole number in range, a URL of given schemes, one of a list), so each
 * bad variable is refused with the same wording wherever it is read.
 */
import { ConfigError } from "../errors.ts";

/** The environment as the loaders read it: process.env, or a test's own record. */
export type Env = Record<string, string | undefined>;

/** DEPLOYMENT's values: the settings' defaults and the payment rules both turn on it. */
export type Deployment = "production" | "staging" | "local";

/** A whole number between `min` and `max`; unset or empty → `fallback`. */
export function int(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `must be a whole number, got "${raw}"`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(name, `must be between ${min} and ${max}, got ${n}`);
  return n;
}

/** A URL whose scheme is one of `protocols` (with the colon, "https:"); unset or empty → undefined. */
export function url(env: Env, name: string, protocols: string[]): string | undefined {
  const raw = env[name];
  if (!raw) return undefined;
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new ConfigError(name, "is not a URL");
  }
  if (!protocols.includes(u.protocol)) throw new ConfigError(name, `must start with ${protocols.join(" or ")}`);
  return raw;
}

/** One of `values`, spelled exactly; unset or empty → `fallback`. */
export function oneOf<T extends string>(env: Env, name: string, values: readonly T[], fallback: T): T {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  if (!(values as readonly string[]).includes(raw)) throw new ConfigError(name, `must be one of ${values.join(", ")}, got "${raw}"`);
  return raw as T;
}
