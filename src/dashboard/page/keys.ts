/**
 * The API keys card: the table of keys with their spend, creating a key (with a budget or a code) and revoking
 * one. Each change is signed by the wallet; `refresh` re-reads the private parts after it.
 */
import { api, ApiFailure } from "./api.ts";
import type { KeySummary, UsageKey } from "./credit.ts";
import { $, fill, fmtDate, fmtInt, fmtUsd, h, parseUsd, show } from "./dom.ts";
import { busy, report, sign } from "./state.ts";

export function renderKeys(keys: KeySummary[], usage: UsageKey[], refresh: () => Promise<void>): void {
  const byId = new Map(usage.map((u) => [u.api_key_id, u]));
  const rows = [...keys].reverse().map((k) => {
    const u = byId.get(k.id);
    const revoke = h("button", { type: "button", class: "danger", "data-key": k.id }, "Revoke");
    revoke.addEventListener("click", () => busy(revoke, () => revokeKey(k, refresh)));
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
  fill(
    $("keys").querySelector("tbody")!,
    ...(rows.length ? rows : [h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No keys yet. Create one above."))]),
  );
}

/** Creates a key from the form and shows it once (the server never shows it again). */
export async function createKey(refresh: () => Promise<void>): Promise<void> {
  report("keys-error");
  const body: Record<string, unknown> = { label: ($("key-label") as HTMLInputElement).value.trim() };
  const budgetText = ($("key-budget") as HTMLInputElement).value;
  if (budgetText.trim()) {
    const usd = parseUsd(budgetText);
    if (usd === null)
      return report(
        "keys-error",
        new ApiFailure(400, { error: "VALIDATION_ERROR", message: "budget: a USD amount like 20 or 2.50" }),
        "create-key",
      );
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
    $("new-key-note").textContent = created.redeemed_credit_usdc
      ? `The redeem code added ${fmtUsd(created.redeemed_credit_usdc)} to your credit.`
      : "";
    show($("new-key"), true);
    ($("key-form") as HTMLFormElement).reset();
    show($("key-code-box"), false);
  } catch (e) {
    return report("keys-error", e, "create-key");
  }
  await refresh();
}

/** Revokes `k` after the person confirms it in the dialog. */
async function revokeKey(k: KeySummary, refresh: () => Promise<void>): Promise<void> {
  report("keys-error");
  const dialog = $("confirm") as HTMLDialogElement;
  $("confirm-text").textContent =
    `Revoke “${k.label || "(no label)"}” (#${k.id})? Apps using it stop working at once, and it cannot be turned back on. Your wallet asks you to sign the revocation.`;
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
  await refresh();
}
