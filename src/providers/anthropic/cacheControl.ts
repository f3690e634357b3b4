import type { CacheControl } from "./wire.ts";

/**
 * A client's `cache_control` breakpoint as Anthropic receives it, rebuilt from what it may say: `ephemeral`, with a
 * `ttl` of 5m or 1h (anything else of a ttl is left out: the 5-minute default). Undefined for anything else, which
 * is left out (the block goes without a breakpoint). A breakpoint may make the provider write the prefix to its
 * cache at 1.25× (5m) or 2× (1h) the input price: the hold covers it (tariff/hold.ts mayWriteCache), the charge
 * bills it at the catalog's write prices, and later turns read it at the cached price.
 */
export function cacheControlOf(v: unknown): CacheControl | undefined {
  if (!v || typeof v !== "object" || (v as { type?: unknown }).type !== "ephemeral") return undefined;
  const ttl = (v as { ttl?: unknown }).ttl;
  return ttl === "5m" || ttl === "1h" ? { type: "ephemeral", ttl } : { type: "ephemeral" };
}

/** `block` with the client's breakpoint `from` carries, if it carries one. */
export function withCacheControl<T extends object>(block: T, from: unknown): T & { cache_control?: CacheControl } {
  const cc = from && typeof from === "object" ? cacheControlOf((from as { cache_control?: unknown }).cache_control) : undefined;
  return cc ? { ...block, cache_control: cc } : block;
}
