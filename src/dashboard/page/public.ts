/**
 * What the page shows without a browser wallet: the models and their prices, a wallet's credit looked up by its
 * address (and with one of its API keys, its usage per key), and how to call the API with a key from a terminal.
 * A pasted key is kept in sessionStorage only: this tab, until it closes; never localStorage or a cookie.
 */
import { api, explain } from "./api.ts";
import type { Usage, UsageKey } from "./credit.ts";
import { $, fill, fmtInt, fmtUsd, h, show } from "./dom.ts";
import { busy, newestOnly } from "./state.ts";

/** One model in GET /v1/models; `available` is the gateway's reachability probe of a local provider. */
interface ModelRow {
  id: string;
  name: string;
  provider: string;
  contextLength: number;
  promptPricePer1MTokens: number;
  completionPricePer1M: number;
  available?: boolean;
}

/** A usage key with its label (UsageKey in the spec). */
type LabelledUsage = Omit<Usage, "keys"> & { keys: (UsageKey & { label?: string })[] };

const STORE = "gw-lookup";
const lookupRead = newestOnly();

function curlSnippet(model: string): string {
  return [
    `curl ${location.origin}/v1/chat/completions \\`,
    `  -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" \\`,
    `  -d '{"model": "${model}", "messages": [{"role": "user", "content": "Hello"}]}'`,
    ``,
    `curl ${location.origin}/v1/usage/$WALLET -H "Authorization: Bearer $KEY"   # its usage and balance`,
  ].join("\n");
}

/** The models card, and the command-line card's example with the first model that answers. */
async function loadModels(): Promise<void> {
  let models: ModelRow[] = [];
  try {
    models = (await api<{ data: ModelRow[] }>("/v1/models")).body.data;
  } catch (e) {
    show($("models-error"), true);
    $("models-error").textContent = explain(e, "read");
  }
  const rows = models.map((m) =>
    h(
      "tr",
      {},
      h("td", {}, h("span", { class: "mono" }, m.id), " ", h("span", { class: "muted" }, m.name)),
      h("td", { class: "num" }, fmtInt(m.contextLength)),
      h("td", { class: "num" }, String(m.promptPricePer1MTokens)),
      h("td", { class: "num" }, String(m.completionPricePer1M)),
      h("td", {}, m.provider, m.available === false ? h("span", { class: "down" }, " (not answering)") : null),
    ),
  );
  fill(
    $("models").querySelector("tbody")!,
    ...(rows.length ? rows : [h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No models served."))]),
  );
  $("cli-snippet").textContent = curlSnippet((models.find((m) => m.available !== false) ?? models[0])?.id ?? "provider/model");
}

/** The wallet's public credit; with a key, its usage per key. */
async function lookup(): Promise<void> {
  const wallet = ($("lookup-wallet") as HTMLInputElement).value.trim();
  const key = ($("lookup-key") as HTMLInputElement).value.trim();
  const error = $("lookup-error");
  const isNewest = lookupRead();
  show(error, false);
  if (!/^0x[0-9a-fA-F]{40}$/.test(wallet)) {
    show(error, true);
    error.textContent = "Enter a wallet address: 0x followed by 40 hexadecimal digits.";
    return;
  }
  sessionStorage.setItem(STORE, JSON.stringify({ wallet, key }));
  try {
    const balance = (await api<{ available_usdc: number }>(`/v1/balance/${wallet}`)).body;
    const usage = key ? (await api<LabelledUsage>(`/v1/usage/${wallet}`, { headers: { authorization: `Bearer ${key}` } })).body : null;
    if (!isNewest()) return;
    show($("lookup-result"), true);
    $("lookup-available").textContent = fmtUsd(usage?.available_usdc ?? balance.available_usdc);
    for (const el of Array.from(document.querySelectorAll<HTMLElement>("#lookup-result .keyed"))) show(el, usage !== null);
    if (!usage) return;
    $("lookup-locked").textContent = fmtUsd(usage.locked_usdc);
    $("lookup-balance").textContent = fmtUsd(usage.balance_usdc);
    const rows = usage.keys.map((k) =>
      h(
        "tr",
        {},
        h("td", {}, `${k.label || "(no label)"} #${k.api_key_id}`),
        h("td", { class: "num" }, fmtInt(k.request_count)),
        h("td", { class: "num" }, `${fmtInt(k.total_prompt_tokens)} / ${fmtInt(k.total_completion_tokens)}`),
        h("td", { class: "num" }, fmtUsd(k.total_charged_usdc)),
      ),
    );
    fill(
      $("lookup-keys").querySelector("tbody")!,
      ...(rows.length ? rows : [h("tr", {}, h("td", { colspan: 4, class: "muted" }, "No keys."))]),
    );
  } catch (e) {
    if (!isNewest()) return;
    show($("lookup-result"), false);
    show(error, true);
    error.textContent = explain(e, "lookup");
  }
}

/** Wires the cards that need no wallet; a lookup of this tab's is run again after a reload. */
export function initPublic(): void {
  $("cli-base").textContent = `${location.origin}/v1`;
  void loadModels();
  $("lookup-form").addEventListener("submit", (e) => {
    e.preventDefault();
    void busy($("lookup-go") as HTMLButtonElement, lookup);
  });
  $("lookup-forget").addEventListener("click", () => {
    ($("lookup-key") as HTMLInputElement).value = "";
    sessionStorage.removeItem(STORE);
    show($("lookup-result"), false);
  });
  const kept = JSON.parse(sessionStorage.getItem(STORE) ?? "null") as { wallet: string; key: string } | null;
  if (kept) {
    ($("lookup-wallet") as HTMLInputElement).value = kept.wallet;
    ($("lookup-key") as HTMLInputElement).value = kept.key;
    void busy($("lookup-go") as HTMLButtonElement, lookup);
  }
}
