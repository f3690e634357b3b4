/** Admin commands about credit: grants, a wallet's balance, redeem codes, referral codes and the referral report. */
import { hashRedeemCode } from "../modules/keys/keys.service.ts";
import { formatUsd, parseUsd } from "../billing/money.ts";
import { AdminFailure, AdminUsageError, type AdminCommand, noArgs, option, walletArg } from "./command.ts";

const MAX_CODES = 10_000;

/** Credits a wallet without a payment; `--id` makes a retry after a timeout a no-op rather than a second grant. */
export function grant(rest: string[]): AdminCommand {
  const [walletArgument, usdArg] = rest;
  const reason = option(rest, "--reason");
  const idArg = option(rest, "--id");
  if (idArg !== undefined && !/^[A-Za-z0-9._:-]{1,100}$/.test(idArg))
    throw new AdminUsageError(`--id must be 1-100 of A-Z a-z 0-9 . _ : -`);
  const wallet = walletArg(walletArgument);
  const amount = usdArg ? parseUsd(usdArg) : null;
  if (!amount) throw new AdminUsageError(`usd must be a positive amount with at most 6 decimals`);
  if (!reason?.trim()) throw new AdminUsageError(`--reason is required: grants are audited`);
  return async (s) => {
    const eventId = `grant:${idArg ?? crypto.randomUUID()}`;
    let r;
    try {
      r = await s.credits.add({ eventId, wallet, kind: "grant", amountUsdc: amount, reason: reason.trim() });
    } catch (e) {
      // Recorded in Postgres but not yet in the live ledger: the gateway's repair job applies it; granting
      // again would credit twice.
      const [row] = await s.sql<{ id: number }[]>`SELECT id FROM credits WHERE event_id = ${eventId}`.catch(() => []);
      if (!row) throw e;
      return `recorded grant of ${formatUsd(amount)} USD to ${wallet} as credit #${row.id}; the running gateway applies it to the balance within a minute (do not grant again)`;
    }
    if (r.duplicate) {
      const [prior] = await s.sql<{ wallet: string; amount_usdc: number }[]>`SELECT wallet, amount_usdc FROM credits WHERE id = ${r.id}`;
      if (prior && (prior.wallet !== wallet || prior.amount_usdc !== amount)) {
        throw new AdminFailure(
          `--id ${idArg} was used for another grant (credit #${r.id}: ${formatUsd(prior.amount_usdc)} USD to ${prior.wallet}); nothing granted`,
        );
      }
      return `already granted: ${eventId} is credit #${r.id}; not granted again (balance ${formatUsd(r.balance)} USD)`;
    }
    return `granted ${formatUsd(amount)} USD to ${wallet} (credit #${r.id}); balance ${formatUsd(r.balance)} USD`;
  };
}

/** The ledger's view (Redis, where every reserve is checked), in USD. */
export function balance(rest: string[]): AdminCommand {
  const [walletArgument, ...more] = rest;
  const wallet = walletArg(walletArgument);
  return noArgs(more, async (s) => {
    const { balance, locked } = await s.ledger.reads.balance(wallet);
    return [
      "wallet\tbalance_usd\tlocked_usd\tavailable_usd",
      [wallet, formatUsd(balance), formatUsd(locked), formatUsd(balance - locked)].join("\t"),
    ].join("\n");
  });
}

/** Prints the codes once; Postgres keeps only their SHA-256 (a leaked database redeems nothing). */
export function createRedeemCodes(args: string[]): AdminCommand {
  const usd = option(args, "--usd");
  const amount = usd ? parseUsd(usd) : null;
  if (!amount) throw new AdminUsageError(`--usd must be a positive amount with at most 6 decimals`);
  const countArg = option(args, "--count") ?? "1";
  const count = /^\d+$/.test(countArg) ? Number(countArg) : 0;
  if (count < 1 || count > MAX_CODES) throw new AdminUsageError(`--count must be 1..${MAX_CODES}`);
  return async (s) => {
    const batch = `batch-${new Date().toISOString()}`;
    const codes = Array.from({ length: count }, () => `rdm-${Buffer.from(crypto.getRandomValues(new Uint8Array(16))).toString("hex")}`);
    const rows = codes.map((c) => ({ code_hash: hashRedeemCode(c), amount_usdc: amount, batch }));
    await s.sql`INSERT INTO redeem_codes ${s.sql(rows, "code_hash", "amount_usdc", "batch")}`;
    return [`# ${count} redeem code(s) of ${formatUsd(amount)} USD (${batch}); shown once, only their hashes are stored`, ...codes].join(
      "\n",
    );
  };
}

/** A referrer's code: chosen with `--code`, or a random one. */
export function createRefCode(args: string[]): AdminCommand {
  const owner = walletArg(option(args, "--owner"), "--owner");
  const chosen = option(args, "--code")?.toLowerCase();
  if (chosen !== undefined && !/^[a-z0-9][a-z0-9-]{2,31}$/.test(chosen))
    throw new AdminUsageError(`--code must be 3-32 letters, digits or dashes`);
  return async (s) => {
    const code = chosen ?? `ref-${Buffer.from(crypto.getRandomValues(new Uint8Array(5))).toString("hex")}`;
    const rows = await s.sql`INSERT INTO ref_codes (code, owner) VALUES (${code}, ${owner}) ON CONFLICT (code) DO NOTHING RETURNING code`;
    if (rows.length !== 1) throw new AdminFailure(`ref code "${code}" exists already`);
    return `ref code ${code} for ${owner}`;
  };
}

/** Usage report per referrer: referred wallets, their top-ups and their charges (tab-separated). */
export const referrals: AdminCommand = async (s) => {
  const rows = await s.sql<{ referrer: string; codes: string; wallets: number; topup_usdc: number; spent_usdc: number }[]>`
    SELECT r.referrer,
           string_agg(DISTINCT r.ref_code, ',') AS codes,
           COUNT(*)::bigint AS wallets,
           COALESCE((SELECT SUM(c.amount_usdc) FROM credits c JOIN referrals x ON x.wallet = c.wallet
                     WHERE x.referrer = r.referrer AND c.kind = 'topup'), 0)::bigint AS topup_usdc,
           COALESCE((SELECT SUM(e.amount_usdc) FROM ledger_events e JOIN referrals x ON x.wallet = e.wallet
                     WHERE x.referrer = r.referrer AND e.type = 'charge'), 0)::bigint AS spent_usdc
    FROM referrals r GROUP BY r.referrer ORDER BY wallets DESC, r.referrer`;
  const lines = ["referrer\tcodes\twallets\ttopups_usd\tspent_usd"];
  for (const r of rows) lines.push([r.referrer, r.codes, r.wallets, formatUsd(r.topup_usdc), formatUsd(r.spent_usdc)].join("\t"));
  return lines.join("\n");
};
