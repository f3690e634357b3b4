import type { ProviderType } from "./catalog.ts";
import { openaiAdapter } from "./openai/adapter.ts";
import type { ProviderAdapter } from "./types.ts";

const ADAPTERS: Partial<Record<ProviderType, ProviderAdapter>> = { openai: openaiAdapter };

/** The wire adapter for a provider type. */
export function adapterFor(type: ProviderType): ProviderAdapter {
  const a = ADAPTERS[type];
  if (!a) throw new Error(`no adapter for provider type ${type}`);
  return a;
}
