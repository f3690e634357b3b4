import { EnvRefError, expandEnvRefs } from "./envRefs.ts";
import { CatalogError, listedTier, longContext, positiveInt, prices, type LongContext, type Prices } from "./prices.ts";

export { CatalogError, type LongContext, type Prices };

/** The most prompt tokens one image part can cost, by its `detail` ("auto" and absent bill as "high"). */
export interface ImageTokens {
  low: number;
  high: number;
}

/** What a model does (catalog `kind`, default chat): the endpoints that serve it. */
export type ModelKind = "chat" | "embedding";

/** The endpoint a model of each kind is called on (a request on another is 400 naming this one). */
export const KIND_ENDPOINT: Record<ModelKind, string> = { chat: "POST /v1/chat/completions", embedding: "POST /v1/embeddings" };

/** Wire dialect of an upstream; each has an adapter under src/providers/<type>/. */
export type ProviderType = "openai" | "anthropic";

/** One upstream as configured in the catalog file, with its secret resolved. */
export interface Provider {
  name: string;
  type: ProviderType;
  baseUrl: string;
  /** Unset for a keyless provider (a local OpenAI-compatible server: Ollama, vLLM, llama.cpp, LM Studio). */
  apiKey?: string;
}

/** Whether a catalog provider serves: keyless, keyed (its variable set) or off (its variable unset). */
export interface ProviderState {
  name: string;
  state: "keyless" | "keyed" | "off";
  /** The API key variable the catalog names, if any. */
  apiKeyEnv?: string;
}

/** A model as the gateway bills it: its base price card, and a long-context one when the catalog gives it. */
export interface Model extends Prices {
  id: string;
  name: string;
  provider: Provider;
  upstreamModel: string;
  contextLength: number;
  maxOutputTokens: number;
  /** The most one image part can cost this model, by detail; absent: an image holds the context window (tariff/hold.ts). */
  imageTokens?: ImageTokens;
  longContext?: LongContext;
  /** Which endpoint serves it: chat (chat completions, Responses, Messages) or embedding (POST /v1/embeddings). */
  kind: ModelKind;
  /**
   * Served catalog models tried in order when this one's provider fails before its answer starts (catalog
   * `fallbacks`; one level: a fallback's own fallbacks are not followed). Absent: none.
   */
  fallbacks?: Model[];
  /**
   * Other names the model answers to on every door (an agent's own default ids: `claude-haiku-4-5`, `gpt-5-codex`),
   * billed as this model; the answer names what was asked for. Absent: none.
   */
  aliases?: string[];
}

/** The loaded catalog: lookup by id, and what serves. */
export interface Catalog {
  models: Map<string, Model>;
  /** Served models by alias (Model.aliases): lookups go through findModel, which reads both maps. */
  aliases: Map<string, Model>;
  /** Catalog models whose provider is off, by id → the provider's state (for a precise UNKNOWN_MODEL). */
  disabled: Map<string, ProviderState>;
  /** Every provider of the catalog and whether it serves, for the start-up log. */
  providers: ProviderState[];
}

function imageTokens(value: unknown, where: string): ImageTokens | undefined {
  if (value === undefined) return undefined;
  if (!value || typeof value !== "object") throw new CatalogError(`${where} must be an object {low, high}`);
  const { low, high } = value as Record<string, unknown>;
  return { low: positiveInt(low, `${where}.low`), high: positiveInt(high, `${where}.high`) };
}

function modelKind(value: unknown, where: string): ModelKind {
  if (value === undefined) return "chat";
  if (value !== "chat" && value !== "embedding") throw new CatalogError(`${where} must be "chat" or "embedding"`);
  return value;
}

function str(value: unknown, where: string): string {
  if (typeof value !== "string" || value.length === 0) throw new CatalogError(`${where} must be a non-empty string`);
  return value;
}

/** A model's `aliases`: distinct non-empty strings, none another model's id or alias (`names` collects them). */
function aliasList(value: unknown, where: string, names: Set<string>): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new CatalogError(`${where} must be a list of strings`);
  return value.map((alias, i) => {
    const name = str(alias, `${where}[${i}]`);
    if (names.has(name)) throw new CatalogError(`${where}[${i}] "${name}" is already a model id or alias`);
    names.add(name);
    return name;
  });
}

/** The served model a request's `model` names: its id, or one of its aliases. */
export function findModel(catalog: Catalog, name: string): Model | undefined {
  return catalog.models.get(name) ?? catalog.aliases.get(name);
}

/** A provider's `baseUrl` with its environment references (`${ECHO_PORT:-8081}`) resolved, without a trailing slash. */
function resolveBaseUrl(raw: string, env: Record<string, string | undefined>, where: string): string {
  try {
    return expandEnvRefs(raw, env).replace(/\/+$/, "");
  } catch (e) {
    if (e instanceof EnvRefError) throw new CatalogError(`${where} ${e.message}`);
    throw e;
  }
}

/**
 * Parses the catalog file's JSON. A provider without `apiKeyEnv` is keyless; one whose variable is unset is off,
 * and its models answer UNKNOWN_MODEL saying so instead of being served.
 */
export function parseCatalog(raw: unknown, env: Record<string, string | undefined>): Catalog {
  if (!raw || typeof raw !== "object") throw new CatalogError("catalog must be a JSON object");
  const { providers: rawProviders, models: rawModels } = raw as { providers?: unknown; models?: unknown };
  if (!rawProviders || typeof rawProviders !== "object") throw new CatalogError("providers must be an object");
  if (!Array.isArray(rawModels)) throw new CatalogError("models must be a list");

  const providers = new Map<string, Provider | null>();
  const states = new Map<string, ProviderState>();
  for (const [name, p] of Object.entries(rawProviders as Record<string, Record<string, unknown>>)) {
    const type = p?.type;
    if (type !== "openai" && type !== "anthropic") throw new CatalogError(`providers.${name}.type must be "openai" or "anthropic"`);
    const baseUrl = resolveBaseUrl(str(p.baseUrl, `providers.${name}.baseUrl`), env, `providers.${name}.baseUrl`);
    try {
      new URL(baseUrl);
    } catch {
      throw new CatalogError(`providers.${name}.baseUrl is not a URL`);
    }
    if (p.apiKeyEnv === undefined || p.apiKeyEnv === null) {
      providers.set(name, { name, type, baseUrl });
      states.set(name, { name, state: "keyless" });
      continue;
    }
    const apiKeyEnv = str(p.apiKeyEnv, `providers.${name}.apiKeyEnv`);
    const apiKey = env[apiKeyEnv];
    providers.set(name, apiKey ? { name, type, baseUrl, apiKey } : null);
    states.set(name, { name, state: apiKey ? "keyed" : "off", apiKeyEnv });
  }

  const models = new Map<string, Model>();
  const aliases = new Map<string, Model>();
  const disabled = new Map<string, ProviderState>();
  // Every id and alias of the file, served or not, so a name means one model whichever providers are configured.
  const names = new Set<string>(rawModels.map((m: Record<string, unknown>) => m?.id).filter((id): id is string => typeof id === "string"));
  rawModels.forEach((m: Record<string, unknown>, i: number) => {
    const at = `models[${i}]`;
    const id = str(m?.id, `${at}.id`);
    const providerName = str(m.provider, `${at}.provider`);
    if (!providers.has(providerName)) throw new CatalogError(`${at}.provider "${providerName}" is not in providers`);
    if (!id.startsWith(providerName + "/")) throw new CatalogError(`${at}.id must start with "${providerName}/"`);
    if (models.has(id)) throw new CatalogError(`${at}.id "${id}" appears twice`);
    const model: Omit<Model, "provider"> = {
      id,
      name: str(m.name, `${at}.name`),
      upstreamModel: str(m.upstreamModel, `${at}.upstreamModel`),
      contextLength: positiveInt(m.contextLength, `${at}.contextLength`),
      maxOutputTokens: positiveInt(m.maxOutputTokens, `${at}.maxOutputTokens`),
      imageTokens: imageTokens(m.imageTokens, `${at}.imageTokens`),
      ...prices(m, at),
      aliases: aliasList(m.aliases, `${at}.aliases`, names),
      kind: modelKind(m.kind, `${at}.kind`),
    };
    const tier = longContext(m.longContext, model, model.contextLength, `${at}.longContext`);
    if (tier) model.longContext = tier;
    const provider = providers.get(providerName);
    if (provider) {
      const served = { ...model, provider };
      models.set(id, served);
      for (const alias of model.aliases ?? []) aliases.set(alias, served);
    } else {
      disabled.set(id, states.get(providerName)!);
      for (const alias of model.aliases ?? []) disabled.set(alias, states.get(providerName)!);
    }
  });

  // Fallbacks name other catalog models, so they are resolved once every model is known.
  rawModels.forEach((m: Record<string, unknown>, i: number) => {
    if (m.fallbacks === undefined) return;
    const at = `models[${i}].fallbacks`;
    const id = m.id as string;
    if (!Array.isArray(m.fallbacks)) throw new CatalogError(`${at} must be a list of catalog model ids`);
    const seen = new Set<string>();
    const served: Model[] = [];
    m.fallbacks.forEach((f: unknown, j: number) => {
      const other = str(f, `${at}[${j}]`);
      if (other === id) throw new CatalogError(`${at}[${j}] names the model itself`);
      if (seen.has(other)) throw new CatalogError(`${at}[${j}] "${other}" appears twice`);
      if (!models.has(other) && !disabled.has(other)) throw new CatalogError(`${at}[${j}] "${other}" is not a catalog model id`);
      seen.add(other);
      // A fallback whose provider is off is skipped, like the model itself would be.
      const model = models.get(other);
      if (model) served.push(model);
    });
    const model = models.get(id);
    const kind = modelKind(m.kind, `models[${i}].kind`);
    const other = served.find((f) => f.kind !== kind);
    if (other) throw new CatalogError(`${at}: "${other.id}" is a ${other.kind} model, "${id}" a ${kind} model`);
    if (model && served.length > 0) model.fallbacks = served;
  });

  return { models, aliases, disabled, providers: [...states.values()] };
}

/** Bodies of GET /v1/models and of GET /v1/models/{id} per model, rendered when they change rather than per request. */
export interface ModelPages {
  list: string;
  byId: Map<string, string>;
}

/**
 * Renders the served models: the spec's Model fields, the billed cache prices a model has (extensions, USD per 1M
 * tokens, named as in the catalog), and `available` (an extension): false while the model's provider did not answer
 * its last reachability probe (`reachable`).
 */
export function renderModels(catalog: Catalog, reachable: (provider: string) => boolean): ModelPages {
  const data = [...catalog.models.values()].map((m) => ({
    id: m.id,
    object: "model",
    name: m.name,
    provider: m.provider.name,
    contextLength: m.contextLength,
    promptPricePer1MTokens: m.promptPricePer1MTokens,
    completionPricePer1M: m.completionPricePer1M,
    ...(m.cachedPromptPricePer1M !== undefined && { cachedPromptPricePer1M: m.cachedPromptPricePer1M }),
    ...(m.cacheWritePricePer1M !== undefined && { cacheWritePricePer1M: m.cacheWritePricePer1M }),
    ...(m.cacheWrite1hPricePer1M !== undefined && { cacheWrite1hPricePer1M: m.cacheWrite1hPricePer1M }),
    ...(m.longContext && { longContext: listedTier(m.longContext) }),
    aliases: m.aliases ?? [],
    kind: m.kind,
    available: reachable(m.provider.name),
  }));
  return { list: JSON.stringify({ object: "list", data }), byId: new Map(data.map((d) => [d.id, JSON.stringify(d)])) };
}

/** Why a model id is not served: not in the catalog, or its provider is not configured. */
export function unknownModelReason(catalog: Catalog, id: string): string {
  const shown = JSON.stringify(id.slice(0, 200));
  const off = catalog.disabled.get(id);
  if (!off) return `Unknown model ${shown}; GET /v1/models lists the models served`;
  return `Model ${shown} is in the catalog but its provider "${off.name}" is not configured (${off.apiKeyEnv} is unset)`;
}
