import { anthropicAdapter } from "./anthropic/adapter.ts";
import type { ProviderType } from "./catalog.ts";
import { openaiAdapter } from "./openai/adapter.ts";
import type { ProviderAdapter } from "./types.ts";

const ADAPTERS: Record<ProviderType, ProviderAdapter> = { openai: openaiAdapter, anthropic: anthropicAdapter };

/** The wire adapter for a provider type. */
export function adapterFor(type: ProviderType): ProviderAdapter {
  return ADAPTERS[type];
}
