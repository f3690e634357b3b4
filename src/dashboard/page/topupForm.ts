/**
 * The top-up card: checks the amount, walks the steps of an x402 payment (topup.ts) with progress shown, and
 * tells the credited amount and the transaction.
 */
import { ApiFailure } from "./api.ts";
import { txLink } from "./credit.ts";
import { $, fill, fmtUsd, h, parseUsd, show } from "./dom.ts";
import { cfg, report, state } from "./state.ts";
import { topUp, type TopupStep } from "./topup.ts";

/** Pays the amount in the form; `refresh` re-reads credit and balances afterwards, paid or not. */
export async function runTopup(refresh: () => Promise<void>): Promise<void> {
  report("topup-error");
  show($("topup-result"), false);
  const amount = parseUsd(($("topup-amount") as HTMLInputElement).value);
  const symbol = ($("topup-asset") as HTMLSelectElement).value;
  if (amount === null || amount < cfg.minTopupUsd) {
    return report(
      "topup-error",
      new ApiFailure(400, { error: "VALIDATION_ERROR", message: `amount: at least ${cfg.minTopupUsd} USD, with at most 6 decimals` }),
      "topup",
    );
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
    const r = await topUp(state.wallet!, amount, symbol, cfg.network.chainId, progress);
    if (current) current.className = "done";
    const result = $("topup-result");
    fill(
      result,
      `Credited ${fmtUsd(r.credited_usdc)} (paid in ${symbol}). New balance: ${fmtUsd(r.balance_usdc)}.`,
      r.transaction ? h("br") : null,
      r.transaction ? "Transaction " : null,
      r.transaction ? txLink(r.transaction) : null,
    );
    show(result, true);
  } catch (e) {
    if (current) current.className = "failed";
    report("topup-error", e, "topup", symbol);
  }
  await refresh();
}
