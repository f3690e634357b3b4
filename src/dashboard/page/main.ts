/**
 * The wallet dashboard: connect a browser wallet, sign in with SIWE, manage API keys, see credit and spend,
 * top up with x402. The HTML is static (index.html); this fills it in.
 */
import type { Address } from "viem";
import type { PageConfig } from "../pageConfig.ts";
import { api, ApiFailure, type Doing, explain } from "./api.ts";
import { type DailyUsage, keyColour, spendChart } from "./chart.ts";
import { $, fill, fmtDate, fmtInt, fmtTime, fmtUnits, fmtUsd, h, shortHex, show } from "./dom.ts";
import { forgetSession, type Session, sessionQuery, signIn, storedSession } from "./session.ts";
import { topUp, type TopupStep } from "./topup.ts";
import { ConnectedWallet, type DiscoveredWallet, discoverWallets } from "./wallet.ts";

interface UsageKey {
  api_key_id: number;
  request_count: number;
  total_prompt_tokens: number;
  total_completion_tokens: number;
  total_charged_usdc: number;
}
interface Usage { balance_usdc: number; locked_usdc: number; available_usdc: number; keys: UsageKey[] }
interface KeySummary { id: number; label: string; created_at: string; revoked_at: string | null }
interface Topups { network: string; topups: { id: number; amount_usdc: number; tx_hash: string; created_at: string }[] }

const cfg = JSON.parse($("gw-config").textContent!) as PageConfig;
const sessionMinutes = Math.round(cfg.siwe.maxAgeS / 60);
let wallet: ConnectedWallet | null = null;
let session: Session | null = null;

/** Shows `e` explained in words in the error line `id` (or clears it). */
function report(id: string, e?: unknown, doing: Doing = "read", asset?: string): void {
  const el = $(id);
  const text = e === undefined ? "" : explain(e, doing, { network: cfg.network.name, asset, sessionMinutes });
  // A refused session is told where the sign-in button is, whatever was being done.
  const signInAgain = e instanceof ApiFailure && e.status === 401 && doing !== "sign-in";
  show(el, e !== undefined && !signInAgain);
  el.textContent = signInAgain ? "" : text;
  if (signInAgain) endSession(text);
}

/** Runs `f` with `button` disabled, so a double click never signs or pays twice. */
async function busy(button: HTMLButtonElement, f: () => Promise<void>): Promise<void> {
  button.disabled = true;
  try {
    await f();
  } finally {
    button.disabled = false;
  }
}

// ---- wallets and connection ------------------------------------------------------------------------------

function renderWallets(list: DiscoveredWallet[]): void {
  if (list.length === 0) {
    fill($("wallets"), h("span", { class: "muted" }, "No browser wallet found. Install one (MetaMask, Rabby, Coinbase Wallet…) or enable it for this site, then reload."));
    return;
  }
  fill(
    $("wallets"),
    ...list.map((d) => {
      const b = h("button", { type: "button", "data-rdns": d.info.rdns }, d.info.icon ? h("img", { src: d.info.icon, alt: "" }) : null, d.info.name);
      b.addEventListener("click", () => busy(b, () => connect(d)));
      return b;
    }),
  );
}

async function connect(d: DiscoveredWallet): Promise<void> {
  report("connect-error");
  try {
    wallet = await ConnectedWallet.connect(d);
  } catch (e) {
    report("connect-error", e);
    return;
  }
  wallet.onChange((what) => (what === "accounts" ? location.reload() : void walletTokens()));
  session = storedSession(wallet.address);
  const disconnect = h("button", { type: "button", class: "link" }, "Disconnect");
  disconnect.addEventListener("click", () => {
    if (wallet) forgetSession(wallet.address);
    location.reload();
  });
  fill($("account"), d.info.icon ? h("img", { src: d.info.icon, alt: "", width: 18, height: 18 }) : null, h("span", { class: "mono", title: wallet.address }, shortHex(wallet.address)), h("span", { class: "muted" }, d.info.name), disconnect);
  show($("connect-card"), false);
  show($("dash"), true);
  renderSession();
  await Promise.all([refreshAvailable(), walletTokens(), session ? refreshPrivate() : null]);
}

// ---- session -----------------------------------------------------------------------------------------------

function renderSession(why?: string): void {
  const signedIn = session !== null;
  for (const el of Array.from(document.querySelectorAll<HTMLElement>(".private"))) show(el, signedIn);
  show($("signin-box"), !signedIn);
  if (why) $("signin-text").textContent = why;
  if (session) $("session-line").textContent = `Signed in until ${fmtTime(session.expiresAt)}. Reading needs no new signature until then; each key change asks for one.`;
}

/** Drops the session (ran out, or the server refused it): the private parts hide until the next sign-in. */
function endSession(why: string): void {
  if (wallet) forgetSession(wallet.address);
  session = null;
  renderSession(why);
}

/** Signs a fresh message for `action` (each change needs one); it becomes the session for reading too. */
async function sign(action: string): Promise<Session> {
  session = await signIn(wallet!, cfg.siwe, action);
  renderSession();
  return session;
}

setInterval(() => {
  if (session && session.expiresAt - 15_000 < Date.now()) {
    endSession(`Your sign-in ran out (it lasts ${sessionMinutes} minutes). Sign in again to see your keys, usage and top-ups: one signature, no transaction.`);
  }
}, 5_000);

// ---- reading -----------------------------------------------------------------------------------------------

async function refreshAvailable(): Promise<void> {
  try {
    const { body } = await api<{ available_usdc: number }>(`/v1/balance/${wallet!.address}`);
    $("available").textContent = fmtUsd(body.available_usdc);
  } catch (e) {
    report("credit-error", e);
  }
}

/** Reads everything the session may see, in parallel; a 401 ends the session (report does). */
async function refreshPrivate(): Promise<void> {
  if (!session || !wallet) return;
  const q = sessionQuery(session);
  const w = wallet.address;
  try {
    const [usage, keys, daily, topups] = await Promise.all([
      api<Usage>(`/v1/usage/${w}?${q}`),
      api<{ data: KeySummary[] }>(`/v1/auth/keys?${q}`),
      api<DailyUsage>(`/v1/usage/${w}/daily?days=30&${q}`),
      api<Topups>(`/v1/topups/${w}?${q}`),
    ]);
    report("credit-error");
    renderCredit(usage.body);
    renderKeys(keys.body.data, usage.body.keys);
    renderChart(daily.body, keys.body.data);
    renderHistory(topups.body);
  } catch (e) {
    report("credit-error", e);
  }
}

function renderCredit(u: Usage): void {
  $("available").textContent = fmtUsd(u.available_usdc);
  $("locked").textContent = fmtUsd(u.locked_usdc);
  $("balance").textContent = fmtUsd(u.balance_usdc);
}

function renderKeys(keys: KeySummary[], usage: UsageKey[]): void {
  const byId = new Map(usage.map((u) => [u.api_key_id, u]));
  const rows = [...keys].reverse().map((k) => {
    const u = byId.get(k.id);
    const revoke = h("button", { type: "button", class: "danger", "data-key": k.id }, "Revoke");
    revoke.addEventListener("click", () => busy(revoke, () => revokeKey(k)));
    return h(
      "tr",
      { class: k.revoked_at ? "revoked" : "", "data-key": k.id },
      h("td", {}, h("strong", {}, k.label || "(no label)"), h("span", { class: "muted small" }, ` #${k.id}`)),
      h("td", {}, fmtDate(k.created_at)),
      h("td", { class: "state" }, k.revoked_at ? `revoked ${fmtDate(k.revoked_at)}` : "active"),
      h("td", { class: "num" }, fmtInt(u?.request_count ?? 0)),
      h("td", { class: "num" }, `${fmtInt(u?.total_prompt_tokens ?? 0)} / ${fmtInt(u?.total_completion_tokens ?? 0)}`),
      h("td", { class: "num spend" }, fmtUsd(u?.total_charged_usdc ?? 0)),
      h("td", {}, k.revoked_at ? null : revoke),
    );
  });
  fill($("keys").querySelector("tbody")!, ...(rows.length ? rows : [h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No keys yet. Create one above."))]));
}

function renderChart(daily: DailyUsage, keys: KeySummary[]): void {
  const ids = keys.map((k) => k.id);
  const spent = new Set(daily.days.flatMap((d) => d.keys.map((k) => k.api_key_id)));
  const total = daily.days.reduce((s, d) => s + d.total_charged_usdc, 0);
  fill($("chart"), spendChart(daily, ids));
  fill(
    $("legend"),
    h("span", {}, total ? `Total ${fmtUsd(total)}` : "No spend in these 30 days."),
    ...keys.filter((k) => spent.has(k.id)).map((k) => h("span", {}, h("i", { style: `background:${keyColour(ids, k.id)}` }), `${k.label || "(no label)"} #${k.id}`)),
  );
}

function txLink(hash: string): Node {
  const text = shortHex(hash);
  return cfg.network.explorer
    ? h("a", { href: `${cfg.network.explorer}/tx/${hash}`, target: "_blank", rel: "noopener", title: hash }, text)
    : h("span", { class: "mono", title: hash }, text);
}

function renderHistory(t: Topups): void {
  $("history-network").textContent = `on ${t.network}`;
  const rows = t.topups.map((r) =>
    h("tr", {}, h("td", {}, fmtDate(r.created_at)), h("td", { class: "num" }, fmtUsd(r.amount_usdc)), h("td", { class: "mono" }, txLink(r.tx_hash))),
  );
  fill($("history").querySelector("tbody")!, ...(rows.length ? rows : [h("tr", {}, h("td", { colspan: 3, class: "muted" }, "No top-ups yet."))]));
}

/** The owner's token balances, when the wallet is on the payment network (another chain's would mislead). */
async function walletTokens(): Promise<void> {
  if (!wallet || !cfg.topupsEnabled) return;
  const line = $("wallet-tokens");
  try {
    if ((await wallet.chainId()) !== cfg.network.chainId) {
      line.textContent = `Your wallet is on another network; the top-up asks it to switch to ${cfg.network.name}.`;
      return;
    }
    const amounts = await Promise.all(cfg.assets.map(async (a) => `${fmtUnits(await wallet!.tokenBalance(a.address as Address), a.decimals)} ${a.symbol}`));
    line.textContent = `In your wallet on ${cfg.network.name}: ${amounts.join(" · ")}`;
  } catch {
    line.textContent = "";
  }
}

// ---- keys ----------------------------------------------------------------------------------------------------

/** A USD amount as the API takes it: digits with at most 6 decimals, else null. */
function parseUsd(text: string): number | null {
  const t = text.trim();
  return /^\d+(\.\d{1,6})?$/.test(t) ? Number(t) : null;
}

async function createKey(): Promise<void> {
  report("keys-error");
  const body: Record<string, unknown> = { label: ($("key-label") as HTMLInputElement).value.trim() };
  const budgetText = ($("key-budget") as HTMLInputElement).value;
  if (budgetText.trim()) {
    const usd = parseUsd(budgetText);
    if (usd === null) return report("keys-error", new ApiFailure(400, { error: "VALIDATION_ERROR", message: "budget: a USD amount like 20 or 2.50" }), "create-key");
    body.budget_usdc = Math.round(usd * 1_000_000);
  }
  const kind = ($("key-code-kind") as HTMLSelectElement).value;
  const code = ($("key-code") as HTMLInputElement).value.trim();
  if (kind && code) body[kind] = code;
  try {
    const s = await sign("Create an API key on the gateway.");
    const { body: created } = await api<{ id: number; key: string; label: string; redeemed_credit_usdc?: number }>("/v1/auth/keys", {
      method: "POST",
      body: JSON.stringify({ ...body, message: s.message, signature: s.signature }),
    });
    ($("new-key-value") as HTMLInputElement).value = created.key;
    $("new-key-note").textContent = created.redeemed_credit_usdc ? `The redeem code added ${fmtUsd(created.redeemed_credit_usdc)} to your credit.` : "";
    show($("new-key"), true);
    ($("key-form") as HTMLFormElement).reset();
    show($("key-code-box"), false);
  } catch (e) {
    return report("keys-error", e, "create-key");
  }
  await refreshPrivate();
}

async function revokeKey(k: KeySummary): Promise<void> {
  report("keys-error");
  const dialog = $("confirm") as HTMLDialogElement;
  $("confirm-text").textContent = `Revoke “${k.label || "(no label)"}” (#${k.id})? Apps using it stop working at once, and it cannot be turned back on. Your wallet asks you to sign the revocation.`;
  dialog.returnValue = "";
  dialog.showModal();
  await new Promise((r) => dialog.addEventListener("close", r, { once: true }));
  if (dialog.returnValue !== "ok") return;
  try {
    const s = await sign(`Revoke API key #${k.id}.`);
    await api(`/v1/auth/keys/${k.id}`, { method: "DELETE", body: JSON.stringify({ message: s.message, signature: s.signature }) });
  } catch (e) {
    report("keys-error", e, "revoke-key");
  }
  await refreshPrivate();
}

// ---- top up ----------------------------------------------------------------------------------------------------

async function runTopup(): Promise<void> {
  report("topup-error");
  show($("topup-result"), false);
  const amount = parseUsd(($("topup-amount") as HTMLInputElement).value);
  const symbol = ($("topup-asset") as HTMLSelectElement).value;
  if (amount === null || amount < cfg.minTopupUsd) {
    return report("topup-error", new ApiFailure(400, { error: "VALIDATION_ERROR", message: `amount: at least ${cfg.minTopupUsd} USD, with at most 6 decimals` }), "topup");
  }
  const steps = Array.from($("topup-steps").querySelectorAll<HTMLElement>("li"));
  for (const li of steps) li.className = "";
  show($("topup-steps"), true);
  let current: HTMLElement | undefined;
  const progress = (step: TopupStep) => {
    if (current) current.className = "done";
    current = steps.find((li) => li.dataset.step === step);
    if (current) current.className = "active";
  };
  try {
    const r = await topUp(wallet!, amount, symbol, cfg.network.chainId, progress);
    if (current) current.className = "done";
    const result = $("topup-result");
    fill(result, `Credited ${fmtUsd(r.credited_usdc)} (paid in ${symbol}). New balance: ${fmtUsd(r.balance_usdc)}.`, r.transaction ? h("br") : null, r.transaction ? "Transaction " : null, r.transaction ? txLink(r.transaction) : null);
    show(result, true);
  } catch (e) {
    if (current) current.className = "failed";
    report("topup-error", e, "topup", symbol);
  }
  await Promise.all([refreshAvailable(), walletTokens(), refreshPrivate()]);
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
    void busy($("topup-go") as HTMLButtonElement, runTopup);
  });
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    void busy($("key-create") as HTMLButtonElement, createKey);
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
  $("refresh").addEventListener("click", () => busy($("refresh") as HTMLButtonElement, async () => void (await Promise.all([refreshAvailable(), refreshPrivate()]))));
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
}

init();
