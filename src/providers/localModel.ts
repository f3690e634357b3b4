/**
 * The local test model: with no provider configured (no MODELS_FILE, and none of the default catalog's provider
 * keys set), a local gateway's first start would serve nothing. `serve` then runs the echo model (echoModel.ts)
 * in-process on a loopback port and serves it as `local/echo`, so the quick start's chat answers at once. Never
 * on when a provider serves, a MODELS_FILE is given, or the deployment is not local (a staging or production
 * gateway must not sell an echo).
 */
import type { Catalog, Model, Provider } from "./catalog.ts";
import { startEchoModel } from "./echoModel.ts";

export const LOCAL_MODEL_ID = "local/echo";

/** Whether `serve` adds the local test model: nothing else would be served. */
export function wantsLocalModel(catalog: Catalog, modelsFileSet: boolean, deployment: string): boolean {
  return !modelsFileSet && deployment === "local" && catalog.models.size === 0;
}

/** The catalog plus `local/echo` on a keyless provider at `baseUrl` (the in-process echo server). */
export function withLocalModel(catalog: Catalog, baseUrl: string): Catalog {
  const provider: Provider = { name: "local", type: "openai", baseUrl };
  // Priced like config/models.local.json's echo, so a chat's charge shows in the balance and usage.
  const model: Model = {
    id: LOCAL_MODEL_ID,
    name: "Local test model (echoes your last message; set a provider key for real models)",
    provider,
    upstreamModel: "echo",
    contextLength: 32768,
    maxOutputTokens: 4096,
    promptPricePer1MTokens: 1,
    completionPricePer1M: 2,
    promptPico: 1_000_000,
    completionPico: 2_000_000,
    costPromptPico: 0,
    costCompletionPico: 0,
    aliases: [],
    kind: "chat",
  };
  return {
    models: new Map([...catalog.models, [model.id, model]]),
    aliases: catalog.aliases,
    disabled: catalog.disabled,
    providers: [...catalog.providers, { name: "local", state: "keyless" }],
  };
}

/** Starts the in-process echo server on a free loopback port; its URL is the local provider's baseUrl. */
export function startLocalModel(): { url: string; stop: () => Promise<void> } {
  const echo = startEchoModel({ port: 0, hostname: "127.0.0.1", record: false });
  return { url: echo.url, stop: echo.stop };
}
