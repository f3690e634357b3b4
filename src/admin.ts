import type { Config } from "./config.ts";
import { hashRedeemCode } from "./modules/keys/keys.service.ts";
import { formatUsd, parseUsd } from "./money.ts";
import { buildServices, type Services } from "./services.ts";
import { openStack } from "./stack.ts";

const USAGE = `usage:
  admin grant <wallet> <usd> --reason <text> [--id ID]
                                                     credit a wallet without a payment (recorded in Postgres);
                                                     with --id, running it again never grants twice
  admin redeem-codes create --usd <usd> [--count N]  one-time codes (printed once, only hashes are stored)
  admin ref-codes create --owner <wallet> [--code C] a referral code of a referrer
  admin referrals                                    per referrer: referred wallets, their top-ups and spend`;

const WALLET = /^0x[0-9a-fA-F]{40}$/;
const MAX_CODES = 10_000;

/** A usage mistake: printed with the usage text, exit code 2. */
export class AdminUsageError extends Error {}

/** A parsed, valid command; runs against the services it is given. */
export type AdminCommand = (s: Services) => Promise<string>;

function option(args: string[], name: string): string | undefined {
  const i = args.indexOf(name);
  return i === -1 ? undefined : args[i + 1];
}

/**
 * Operator commands. They run against the same Redis and Postgres as the gateway: the configured URLs, or the
 * embedded ones in DATA_DIR (joined over their sockets when a gateway is running there, started otherwise).
 * Arguments are checked before anything is opened.
 */
export async function runAdmin(config: Config, args: string[]): Promise<string> {
  const command = parseAdmin(args);
  const stack = await openStack(config);
  const services = await buildServices(config, stack.connections).catch(async (e) => {
    await stack.stop();
    throw e;
  });
  try {
    return await command(services);
  } finally {
    await services.close();
    await stack.stop();
  }
}

/** Validates the arguments (AdminUsageError otherwise) and returns the command. */
export function parseAdmin(args: string[]): AdminCommand {
  const [command, sub, ...more] = args;
  if (command === "grant") return grant(args.slice(1));
  if (command === "redeem-codes" && sub === "create") return createRedeemCodes(more);
  if (command === "ref-codes" && sub === "create") return createRefCode(more);
  if (command === "referrals" && sub === undefined) return referrals;
  throw new AdminUsageError(USAGE);
}

function grant(rest: string[]): AdminCommand {
  const [walletArg, usdArg] = rest;
  const reason = option(rest, "--reason");
  const idArg = option(rest, "--id");
  if (idArg !== undefined && !/^[A-Za-z0-9._:-]{1,100}$/.test(idArg)) throw new AdminUsageError(`--id must be 1-100 of A-Z a-z 0-9 . _ : -\n${USAGE}`);
  if (!walletArg || !WALLET.test(walletArg)) throw new AdminUsageError(`wallet must be a 0x address\n${USAGE}`);
  const amount = usdArg ? parseUsd(usdArg) : null;
  if (!amount) throw new AdminUsageError(`usd must be a positive amount with at most 6 decimals\n${USAGE}`);
  if (!reason?.trim()) throw new AdminUsageError(`--reason is required: grants are audited\n${USAGE}`);
  return async (s) => {
    const wallet = walletArg.toLowerCase();
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
        throw new Error(`--id ${idArg} was used for another grant (credit #${r.id}: ${formatUsd(prior.amount_usdc)} USD to ${prior.wallet}); nothing granted`);
      }
      return `already granted: ${eventId} is credit #${r.id}; not granted again (balance ${formatUsd(r.balance)} USD)`;
    }
    return `granted ${formatUsd(amount)} USD to ${wallet} (credit #${r.id}); balance ${formatUsd(r.balance)} USD`;
  };
}

/** Prints the codes once; Postgres keeps only their SHA-256 (a leaked database redeems nothing). */
function createRedeemCodes(args: string[]): AdminCommand {
  const usd = option(args, "--usd");
  const amount = usd ? parseUsd(usd) : null;
  if (!amount) throw new AdminUsageError(`--usd must be a positive amount with at most 6 decimals\n${USAGE}`);
  const countArg = option(args, "--count") ?? "1";
  const count = /^\d+$/.test(countArg) ? Number(countArg) : 0;
  if (count < 1 || count > MAX_CODES) throw new AdminUsageError(`--count must be 1..${MAX_CODES}\n${USAGE}`);
  return async (s) => {
    const batch = `batch-${new Date().toISOString()}`;
    const codes = Array.from({ length: count }, () => `rdm-${Buffer.from(crypto.getRandomValues(new Uint8Array(16))).toString("hex")}`);
    const rows = codes.map((c) => ({ code_hash: hashRedeemCode(c), amount_usdc: amount, batch }));
    await s.sql`INSERT INTO redeem_codes ${s.sql(rows, "code_hash", "amount_usdc", "batch")}`;
    return [`# ${count} redeem code(s) of ${formatUsd(amount)} USD (${batch}); shown once, only their hashes are stored`, ...codes].join("\n");
  };
}

function createRefCode(args: string[]): AdminCommand {
  const owner = option(args, "--owner");
  if (!owner || !WALLET.test(owner)) throw new AdminUsageError(`--owner must be a 0x wallet address\n${USAGE}`);
  const chosen = option(args, "--code")?.toLowerCase();
  if (chosen !== undefined && !/^[a-z0-9][a-z0-9-]{2,31}$/.test(chosen)) throw new AdminUsageError(`--code must be 3-32 letters, digits or dashes\n${USAGE}`);
  return async (s) => {
    const code = chosen ?? `ref-${Buffer.from(crypto.getRandomValues(new Uint8Array(5))).toString("hex")}`;
    const rows = await s.sql`INSERT INTO ref_codes (code, owner) VALUES (${code}, ${owner.toLowerCase()}) ON CONFLICT (code) DO NOTHING RETURNING code`;
    if (rows.length !== 1) throw new AdminUsageError(`ref code "${code}" exists already`);
    return `ref code ${code} for ${owner.toLowerCase()}`;
  };
}

/** Usage report per referrer: referred wallets, their top-ups and their charges (tab-separated). */
const referrals: AdminCommand = async (s) => {
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
