/**
 * The wallet dashboard: connect a browser wallet, sign in with SIWE, manage API keys, see credit and spend,
 * top up with x402. The HTML is static (index.html); this fills it in: state.ts holds the wallet and session,
 * credit.ts reads and renders, keys.ts and topupForm.ts are the two cards that change things.
 */
import { api } from "./api.ts";
import type { DailyUsage } from "./chart.ts";
import {
  type KeySummary,
  refreshAvailable,
  renderChart,
  renderCredit,
  renderHistory,
  type Topups,
  type Usage,
  walletTokens,
} from "./credit.ts";
import { $, fill, h, shortHex, show } from "./dom.ts";
import { createKey, renderKeys } from "./keys.ts";
import { initPublic } from "./public.ts";
import { forgetSession, sessionQuery, storedSession } from "./session.ts";
import { busy, cfg, endSession, newestOnly, renderSession, report, sessionMinutes, sign, state } from "./state.ts";
import { runTopup } from "./topupForm.ts";
import { ConnectedWallet, type DiscoveredWallet, discoverWallets } from "./wallet.ts";

// ---- wallets and connection ------------------------------------------------------------------------------

function renderWallets(list: DiscoveredWallet[]): void {
  if (list.length === 0) {
    fill(
      $("wallets"),
      h(
        "span",
        { class: "muted" },
        "No browser wallet found. Install one (MetaMask, Rabby, Coinbase Wallet…) or enable it for this site, then reload. Without one, look up a wallet's credit and use an API key below.",
      ),
    );
    return;
  }
  fill(
    $("wallets"),
    ...list.map((d) => {
      const b = h(
        "button",
        { type: "button", "data-rdns": d.info.rdns },
        d.info.icon ? h("img", { src: d.info.icon, alt: "" }) : null,
        d.info.name,
      );
      b.addEventListener("click", () => busy(b, () => connect(d)));
      return b;
    }),
  );
}

async function connect(d: DiscoveredWallet): Promise<void> {
  report("connect-error");
  let wallet: ConnectedWallet;
  try {
    wallet = state.wallet = await ConnectedWallet.connect(d);
  } catch (e) {
    report("connect-error", e);
    return;
  }
  wallet.onChange((what) => (what === "accounts" ? location.reload() : void walletTokens()));
  state.session = storedSession(wallet.address);
  const disconnect = h("button", { type: "button", class: "link" }, "Disconnect");
  disconnect.addEventListener("click", () => {
    if (state.wallet) forgetSession(state.wallet.address);
    location.reload();
  });
  fill(
    $("account"),
    d.info.icon ? h("img", { src: d.info.icon, alt: "", width: 18, height: 18 }) : null,
    h("span", { class: "mono", title: wallet.address }, shortHex(wallet.address)),
    h("span", { class: "muted" }, d.info.name),
    disconnect,
  );
  show($("connect-card"), false);
  show($("lookup-card"), false);
  show($("dash"), true);
  renderSession();
  await Promise.all([refreshAvailable(), walletTokens(), state.session ? refreshPrivate() : null]);
}

setInterval(() => {
  if (state.session && state.session.expiresAt - 15_000 < Date.now()) {
    endSession(
      `Your sign-in ran out (it lasts ${sessionMinutes} minutes). Sign in again to see your keys, usage and top-ups: one signature, no transaction.`,
    );
  }
}, 5_000);

// ---- reading -----------------------------------------------------------------------------------------------

const privateRead = newestOnly();

/** Reads everything the session may see, in parallel; a 401 ends the session (report does). */
async function refreshPrivate(): Promise<void> {
  const { session, wallet } = state;
  if (!session || !wallet) return;
  const isNewest = privateRead();
  const q = sessionQuery(session);
  const w = wallet.address;
  try {
    const [usage, keys, daily, topups] = await Promise.all([
      api<Usage>(`/v1/usage/${w}?${q}`),
      api<{ data: KeySummary[] }>(`/v1/auth/keys?${q}`),
      api<DailyUsage>(`/v1/usage/${w}/daily?days=30&${q}`),
      api<Topups>(`/v1/topups/${w}?${q}`),
    ]);
    if (!isNewest()) return;
    report("credit-error");
    renderCredit(usage.body);
    renderKeys(keys.body.data, usage.body.keys, refreshPrivate);
    renderChart(daily.body, keys.body.data);
    renderHistory(topups.body);
  } catch (e) {
    if (isNewest()) report("credit-error", e);
  }
}

// ---- wiring ----------------------------------------------------------------------------------------------------

function init(): void {
  $("network").textContent = cfg.network.name;
  fill($("topup-asset"), ...cfg.assets.map((a) => h("option", { value: a.symbol }, a.symbol)));
  // Without payments the card says so (its elements stay, so nothing else needs to know).
  show($("topup-form"), cfg.topupsEnabled);
  if (!cfg.topupsEnabled) $("wallet-tokens").textContent = "Top-ups are not enabled on this gateway. Ask its operator for credit.";
  ($("topup-amount") as HTMLInputElement).placeholder = `at least ${cfg.minTopupUsd}`;
  $("topup-form").addEventListener("submit", (e) => {
    e.preventDefault();
    void busy($("topup-go") as HTMLButtonElement, () =>
      runTopup(async () => void (await Promise.all([refreshAvailable(), walletTokens(), refreshPrivate()]))),
    );
  });
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    void busy($("key-create") as HTMLButtonElement, () => createKey(refreshPrivate));
  });
  $("key-code-kind").addEventListener("change", () => show($("key-code-box"), ($("key-code-kind") as HTMLSelectElement).value !== ""));
  $("signin").addEventListener("click", () =>
    busy($("signin") as HTMLButtonElement, async () => {
      report("credit-error");
      try {
        await sign("Sign in to the gateway dashboard.");
      } catch (e) {
        return report("credit-error", e, "sign-in");
      }
      await refreshPrivate();
    }),
  );
  $("refresh").addEventListener("click", () =>
    busy($("refresh") as HTMLButtonElement, async () => void (await Promise.all([refreshAvailable(), refreshPrivate()]))),
  );
  $("new-key-copy").addEventListener("click", async () => {
    const input = $("new-key-value") as HTMLInputElement;
    try {
      await navigator.clipboard.writeText(input.value);
    } catch {
      input.select();
      document.execCommand("copy");
    }
    $("new-key-copy").textContent = "Copied";
    setTimeout(() => ($("new-key-copy").textContent = "Copy"), 2_000);
  });
  $("new-key-done").addEventListener("click", () => {
    ($("new-key-value") as HTMLInputElement).value = "";
    show($("new-key"), false);
  });
  discoverWallets(renderWallets);
  initPublic();
}

init();
