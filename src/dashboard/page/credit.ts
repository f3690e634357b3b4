/**
 * The reading side of the dashboard: credit, per-day spend, top-up history and the wallet's own token
 * balances, each rendered from what the API answered.
 */
import type { Address } from "viem";
import { api } from "./api.ts";
import { type DailyUsage, keyColour, spendChart } from "./chart.ts";
import { $, fill, fmtDate, fmtUnits, fmtUsd, h, shortHex } from "./dom.ts";
import { cfg, newestOnly, report, state } from "./state.ts";

/** One key's totals in GET /v1/usage/{address}. */
export interface UsageKey {
  api_key_id: number;
  request_count: number;
  total_prompt_tokens: number;
  total_completion_tokens: number;
  total_charged_usdc: number;
}
/** GET /v1/usage/{address}. */
export interface Usage {
  balance_usdc: number;
  locked_usdc: number;
  available_usdc: number;
  keys: UsageKey[];
}
/** One key in GET /v1/auth/keys. */
export interface KeySummary {
  id: number;
  label: string;
  created_at: string;
  revoked_at: string | null;
}
/** GET /v1/topups/{address}. */
export interface Topups {
  network: string;
  topups: { id: number; amount_usdc: number; tx_hash: string; created_at: string }[];
}

const availableRead = newestOnly();
const tokensRead = newestOnly();

/** The public available credit: shown before sign-in, since it needs none. */
export async function refreshAvailable(): Promise<void> {
  const isNewest = availableRead();
  try {
    const { body } = await api<{ available_usdc: number }>(`/v1/balance/${state.wallet!.address}`);
    if (isNewest()) $("available").textContent = fmtUsd(body.available_usdc);
  } catch (e) {
    if (isNewest()) report("credit-error", e);
  }
}

export function renderCredit(u: Usage): void {
  $("available").textContent = fmtUsd(u.available_usdc);
  $("locked").textContent = fmtUsd(u.locked_usdc);
  $("balance").textContent = fmtUsd(u.balance_usdc);
}

export function renderChart(daily: DailyUsage, keys: KeySummary[]): void {
  const ids = keys.map((k) => k.id);
  const spent = new Set(daily.days.flatMap((d) => d.keys.map((k) => k.api_key_id)));
  const total = daily.days.reduce((s, d) => s + d.total_charged_usdc, 0);
  fill($("chart"), spendChart(daily, ids));
  fill(
    $("legend"),
    h("span", {}, total ? `Total ${fmtUsd(total)}` : "No spend in these 30 days."),
    ...keys
      .filter((k) => spent.has(k.id))
      .map((k) => h("span", {}, h("i", { style: `background:${keyColour(ids, k.id)}` }), `${k.label || "(no label)"} #${k.id}`)),
  );
}

/** A transaction hash, linked to the block explorer where the network has one. */
export function txLink(hash: string): Node {
  const text = shortHex(hash);
  return cfg.network.explorer
    ? h("a", { href: `${cfg.network.explorer}/tx/${hash}`, target: "_blank", rel: "noopener", title: hash }, text)
    : h("span", { class: "mono", title: hash }, text);
}

export function renderHistory(t: Topups): void {
  $("history-network").textContent = `on ${t.network}`;
  const rows = t.topups.map((r) =>
    h(
      "tr",
      {},
      h("td", {}, fmtDate(r.created_at)),
      h("td", { class: "num" }, fmtUsd(r.amount_usdc)),
      h("td", { class: "mono" }, txLink(r.tx_hash)),
    ),
  );
  fill(
    $("history").querySelector("tbody")!,
    ...(rows.length ? rows : [h("tr", {}, h("td", { colspan: 3, class: "muted" }, "No top-ups yet."))]),
  );
}

/** The owner's token balances, when the wallet is on the payment network (another chain's would mislead). */
export async function walletTokens(): Promise<void> {
  const wallet = state.wallet;
  if (!wallet || !cfg.topupsEnabled) return;
  const line = $("wallet-tokens");
  const isNewest = tokensRead();
  let text = "";
  try {
    if ((await wallet.chainId()) !== cfg.network.chainId) {
      text = `Your wallet is on another network; the top-up asks it to switch to ${cfg.network.name}.`;
    } else {
      const amounts = await Promise.all(
        cfg.assets.map(async (a) => `${fmtUnits(await wallet.tokenBalance(a.address as Address), a.decimals)} ${a.symbol}`),
      );
      text = `In your wallet on ${cfg.network.name}: ${amounts.join(" · ")}`;
    }
  } catch {
    text = "";
  }
  if (isNewest()) line.textContent = text;
}
