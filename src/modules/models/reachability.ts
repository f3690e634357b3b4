/**
 * Which keyless providers answer: a local model server (Ollama, vLLM, llama.cpp) is listed by the catalog whether or
 * not it runs, so GET /v1/models says `available: false` for the models of one that did not answer its last probe.
 * Probed in the background, at start and every PROVIDER_PROBE_INTERVAL_S, never on a request's path. A provider
 * with a key (a hosted API) is not probed: it is taken as reachable.
 */
import { withDeadline } from "../../deadline.ts";
import { log } from "../../log.ts";
import { type Catalog, type ModelPages, type Provider, renderModels } from "../../providers/catalog.ts";

/** How long a probe waits for any answer: a local server answers in milliseconds, a stopped one never. */
export const PROBE_TIMEOUT_MS = 2_000;

/** Any HTTP answer below 500 (a 404 from a server without `/models` too) proves the server listens; a 5xx is a proxy in front of nothing. */
async function answers(p: Provider, timeoutMs: number): Promise<boolean> {
  try {
    const res = await withDeadline(
      timeoutMs,
      (signal) => fetch(`${p.baseUrl}/models`, { signal, redirect: "manual" }),
      () => new Error("probe deadline"),
    );
    await res.body?.cancel().catch(() => {});
    return res.status < 500;
  } catch {
    return false;
  }
}

/** The reachability of the catalog's keyless providers, and the model pages that show it. */
export class ProviderReachability {
  private readonly keyless: Provider[];
  private readonly down = new Set<string>();
  private pages: ModelPages;
  private timer: ReturnType<typeof setInterval> | undefined;
  /** The round in flight (or the last one); rounds never overlap. */
  private round: Promise<void> = Promise.resolve();
  private inFlight = false;
  private waiters: (() => void)[] = [];

  constructor(
    private readonly catalog: Catalog,
    private readonly intervalMs: number,
    private readonly timeoutMs = PROBE_TIMEOUT_MS,
  ) {
    const seen = new Map<string, Provider>();
    for (const m of catalog.models.values()) if (!m.provider.apiKey) seen.set(m.provider.name, m.provider);
    this.keyless = [...seen.values()];
    // Until its first probe answers, a provider counts as reachable: the list never starts out emptier than it is.
    this.pages = renderModels(catalog, () => true);
  }

  /** Body of GET /v1/models. */
  get list(): string {
    return this.pages.list;
  }

  /** Body of GET /v1/models/{id}, or undefined for a model not served; an alias gets its model's page. */
  model(id: string): string | undefined {
    return this.pages.byId.get(id) ?? this.pages.byId.get(this.catalog.aliases.get(id)?.id ?? "");
  }

  /** GET /v1/models as a key limited to some models sees it: only those, in catalog order. */
  listOf(allowed: (id: string) => boolean): string {
    const data = [...this.pages.byId].flatMap(([id, json]) => (allowed(id) ? [json] : []));
    return `{"object":"list","data":[${data.join(",")}]}`;
  }

  /** False while `provider` (keyless) did not answer its last probe. */
  reachable(provider: string): boolean {
    return !this.down.has(provider);
  }

  /** The first probe now, then one every interval (a round still running skips its turn). */
  start(): void {
    if (this.keyless.length === 0 || this.timer) return;
    void this.probeNow();
    this.timer = setInterval(() => {
      if (!this.inFlight) void this.probeNow();
    }, this.intervalMs);
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Probes every keyless provider once, after any round in flight; resolves when the pages show the result. */
  probeNow(): Promise<void> {
    this.round = this.round.then(() => this.probeAll());
    return this.round;
  }

  /** Resolves when the next round (the timer's, or one already running) has finished. */
  nextRound(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  private async probeAll(): Promise<void> {
    this.inFlight = true;
    try {
      const results = await Promise.all(this.keyless.map(async (p) => [p, await answers(p, this.timeoutMs)] as const));
      let changed = false;
      for (const [p, up] of results) {
        if (up === !this.down.has(p.name)) continue;
        changed = true;
        if (up) {
          this.down.delete(p.name);
          log.info("provider reachable again", { provider: p.name });
        } else {
          this.down.add(p.name);
          log.warn("provider unreachable: its models are listed with available false", { provider: p.name });
        }
      }
      if (changed) this.pages = renderModels(this.catalog, (name) => this.reachable(name));
    } finally {
      this.inFlight = false;
      for (const w of this.waiters.splice(0)) w();
    }
  }
}
