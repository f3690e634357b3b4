import type { Config } from "./config.ts";
import { hashRedeemCode } from "./modules/keys/keys.service.ts";
import { formatUsd, parseUsd } from "./money.ts";
import { buildServices, type Services } from "./services.ts";
import { openStack } from "./stack.ts";
import { runAudit } from "./store/audit.ts";
import { assertEmbeddedDataExists, checkDependencies } from "./startup.ts";

const WALLET = /^0x[0-9a-fA-F]{40}$/;
const MAX_CODES = 10_000;

/** A usage mistake: printed with the command's usage, exit code 2. */
export class AdminUsageError extends Error {}

/** `--help` was asked for: the text goes to stdout, exit code 0, nothing is opened. */
export class AdminHelp extends Error {}

/** A command that ran and could not do what was asked (no such key, an --id reused): one line, exit code 1. */
export class AdminFailure extends Error {}

/** A command that ran and printed its report, whose verdict is a failure (audit differences): report on stdout, exit 1. */
export class AdminFailedReport extends Error {
  constructor(readonly report: string) {
    super(report.split("\n")[0]);
  }
}

/** A parsed, valid command; runs against the services it is given. */
export type AdminCommand = (s: Services) => Promise<string>;

/** One admin command: its words, its arguments, what it does, and its parser (which validates before anything opens). */
interface AdminEntry {
  name: string;
  args: string;
  summary: string;
  /** More lines for `admin <name> --help`. */
  details?: string;
  parse(rest: string[]): AdminCommand;
}

/** Every admin command. Adding one is adding an entry (with its parser): dispatch and help follow from the table. */
const COMMANDS: AdminEntry[] = [
  {
    name: "grant",
    args: "<wallet> <usd> --reason <text> [--id ID]",
    summary: "credit a wallet without a payment (recorded in Postgres)",
    details: "With --id, running it again never grants twice (an operator retrying after a timeout).",
    parse: (rest) => grant(rest),
  },
  { name: "balance", args: "<wallet>", summary: "a wallet's balance, locked and available credit (USD, tab-separated)", parse: (rest) => balance(rest) },
  { name: "keys list", args: "<wallet>", summary: "a wallet's API keys: id, label, created, revoked (tab-separated)", parse: (rest) => listKeys(rest) },
  {
    name: "keys revoke",
    args: "<id>",
    summary: "revoke an API key (as DELETE /v1/auth/keys/{id} does: Postgres, then Redis)",
    details: "Takes effect on the key's very next request. Revoking a revoked key again re-asserts it.",
    parse: (rest) => revokeKey(rest),
  },
  {
    name: "redeem-codes create",
    args: "--usd <usd> [--count N]",
    summary: "one-time redeem codes (printed once, only their hashes are stored)",
    parse: (rest) => createRedeemCodes(rest),
  },
  { name: "ref-codes create", args: "--owner <wallet> [--code C]", summary: "a referral code of a referrer", parse: (rest) => createRefCode(rest) },
  { name: "referrals", args: "", summary: "per referrer: referred wallets, their top-ups and spend (tab-separated)", parse: (rest) => noArgs(rest, referrals) },
  {
    name: "audit",
    args: "[--fix]",
    summary: "compare Redis with Postgres for every wallet and key; exit 1 on a difference",
    details: "Prints the differences and totals as a table. --fix rebuilds the Redis ledger from Postgres, then audits again and exits by that.",
    parse: (rest) => audit(rest),
  },
];

const line = (e: AdminEntry) => `admin ${e.name}${e.args ? " " + e.args : ""}`;

/** The overview printed by `admin --help` and after a usage mistake. */
export const ADMIN_USAGE = [
  "usage: bun src/main.ts admin <command> [arguments]   (or: gateway admin …)",
  "",
  ...COMMANDS.map((e) => `  ${line(e).padEnd(54)} ${e.summary}`),
  "",
  "Each command takes --help. Runs against the gateway's Redis and Postgres: REDIS_URL and DATABASE_URL, or the",
  "embedded ones in DATA_DIR (./data) — joined while a gateway serves them, refused where DATA_DIR holds none.",
  "The answer is printed on stdout; logs and warnings go to stderr.",
].join("\n");

function usageOf(e: AdminEntry): string {
  return [`usage: ${line(e)}`, "", `  ${e.summary}`, ...(e.details ? [`  ${e.details}`] : [])].join("\n");
}

function option(args: string[], name: string): string | undefined {
  const i = args.indexOf(name);
  return i === -1 ? undefined : args[i + 1];
}

/**
 * Operator commands. They run against the same Redis and Postgres as the gateway: the configured URLs, or the
 * embedded ones in DATA_DIR (joined over their sockets when a gateway is running there, started over its data
 * when none is, refused when DATA_DIR holds no gateway data). Arguments are checked before anything is opened,
 * and whatever this process started is stopped again, whatever happens.
 */
export async function runAdmin(config: Config, args: string[]): Promise<string> {
  const command = parseAdmin(args);
  assertEmbeddedDataExists(config);
  const stack = await openStack(config);
  try {
    await checkDependencies(stack.connections);
    const services = await buildServices(config, stack.connections);
    try {
      return await command(services);
    } finally {
      await services.close();
    }
  } finally {
    await stack.stop();
  }
}

/** Validates the arguments and returns the command; AdminHelp for --help, AdminUsageError for a mistake. */
export function parseAdmin(args: string[]): AdminCommand {
  const entry = [...COMMANDS].sort((a, b) => b.name.length - a.name.length).find((e) => {
    const words = e.name.split(" ");
    return words.every((w, i) => args[i] === w);
  });
  const wantsHelp = args.includes("--help") || args.includes("-h");
  if (!entry) {
    if (wantsHelp || args[0] === "help") throw new AdminHelp(ADMIN_USAGE);
    if (args.length === 0) throw new AdminUsageError(ADMIN_USAGE);
    throw new AdminUsageError(`unknown admin command "${args.slice(0, 2).join(" ")}"\n\n${ADMIN_USAGE}`);
  }
  if (wantsHelp) throw new AdminHelp(usageOf(entry));
  try {
    return entry.parse(args.slice(entry.name.split(" ").length));
  } catch (e) {
    if (e instanceof AdminUsageError) throw new AdminUsageError(`${e.message}\n${usageOf(entry)}`);
    throw e;
  }
}

function noArgs(rest: string[], command: AdminCommand): AdminCommand {
  if (rest.length > 0) throw new AdminUsageError(`unexpected argument "${rest[0]}"`);
  return command;
}

function walletArg(value: string | undefined, what = "wallet"): string {
  if (!value || !WALLET.test(value)) throw new AdminUsageError(`${what} must be a 0x address`);
  return value.toLowerCase();
}

/** Redis vs Postgres, wallet by wallet and key by key (src/store/audit.ts); differences exit 1. */
function audit(rest: string[]): AdminCommand {
  const fix = rest[0] === "--fix";
  const extra = rest.slice(fix ? 1 : 0);
  if (extra.length > 0) throw new AdminUsageError(`unexpected argument "${extra[0]}"`);
  return async (s) => {
    const r = await runAudit(s, { fix });
    if (!r.clean) throw new AdminFailedReport(r.output);
    return r.output;
  };
}

function grant(rest: string[]): AdminCommand {
  const [walletArgument, usdArg] = rest;
  const reason = option(rest, "--reason");
  const idArg = option(rest, "--id");
  if (idArg !== undefined && !/^[A-Za-z0-9._:-]{1,100}$/.test(idArg)) throw new AdminUsageError(`--id must be 1-100 of A-Z a-z 0-9 . _ : -`);
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
        throw new AdminFailure(`--id ${idArg} was used for another grant (credit #${r.id}: ${formatUsd(prior.amount_usdc)} USD to ${prior.wallet}); nothing granted`);
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
  if (!amount) throw new AdminUsageError(`--usd must be a positive amount with at most 6 decimals`);
  const countArg = option(args, "--count") ?? "1";
  const count = /^\d+$/.test(countArg) ? Number(countArg) : 0;
  if (count < 1 || count > MAX_CODES) throw new AdminUsageError(`--count must be 1..${MAX_CODES}`);
  return async (s) => {
    const batch = `batch-${new Date().toISOString()}`;
    const codes = Array.from({ length: count }, () => `rdm-${Buffer.from(crypto.getRandomValues(new Uint8Array(16))).toString("hex")}`);
    const rows = codes.map((c) => ({ code_hash: hashRedeemCode(c), amount_usdc: amount, batch }));
    await s.sql`INSERT INTO redeem_codes ${s.sql(rows, "code_hash", "amount_usdc", "batch")}`;
    return [`# ${count} redeem code(s) of ${formatUsd(amount)} USD (${batch}); shown once, only their hashes are stored`, ...codes].join("\n");
  };
}

function createRefCode(args: string[]): AdminCommand {
  const owner = walletArg(option(args, "--owner"), "--owner");
  const chosen = option(args, "--code")?.toLowerCase();
  if (chosen !== undefined && !/^[a-z0-9][a-z0-9-]{2,31}$/.test(chosen)) throw new AdminUsageError(`--code must be 3-32 letters, digits or dashes`);
  return async (s) => {
    const code = chosen ?? `ref-${Buffer.from(crypto.getRandomValues(new Uint8Array(5))).toString("hex")}`;
    const rows = await s.sql`INSERT INTO ref_codes (code, owner) VALUES (${code}, ${owner}) ON CONFLICT (code) DO NOTHING RETURNING code`;
    if (rows.length !== 1) throw new AdminFailure(`ref code "${code}" exists already`);
    return `ref code ${code} for ${owner}`;
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

/** The ledger's view (Redis, where every reserve is checked), in USD. */
function balance(rest: string[]): AdminCommand {
  const [walletArgument, ...more] = rest;
  const wallet = walletArg(walletArgument);
  return noArgs(more, async (s) => {
    const { balance, locked } = await s.ledger.balance(wallet);
    return ["wallet\tbalance_usd\tlocked_usd\tavailable_usd", [wallet, formatUsd(balance), formatUsd(locked), formatUsd(balance - locked)].join("\t")].join("\n");
  });
}

function listKeys(rest: string[]): AdminCommand {
  const [walletArgument, ...more] = rest;
  const wallet = walletArg(walletArgument);
  return noArgs(more, async (s) => {
    const lines = ["id\tlabel\tcreated_at\trevoked_at"];
    for (const k of await s.keys.list(wallet)) lines.push([k.id, k.label, k.created_at, k.revoked_at ?? "-"].join("\t"));
    return lines.join("\n");
  });
}

/** Through KeyService, like DELETE /v1/auth/keys/{id}: Postgres first (the record), then Redis (what reserve checks). */
function revokeKey(rest: string[]): AdminCommand {
  const [idArg, ...more] = rest;
  if (!idArg || !/^[1-9][0-9]{0,14}$/.test(idArg)) throw new AdminUsageError("id must be a key id (a positive integer)");
  const id = Number(idArg);
  return noArgs(more, async (s) => {
    const [row] = await s.sql<{ wallet: string; revoked_at: Date | null }[]>`SELECT wallet, revoked_at FROM api_keys WHERE id = ${id}`;
    if (!row) throw new AdminFailure(`no API key #${id}`);
    await s.keys.revoke(row.wallet, id);
    return row.revoked_at
      ? `key #${id} of ${row.wallet} was already revoked at ${row.revoked_at.toISOString()}; revocation re-asserted`
      : `revoked key #${id} of ${row.wallet}`;
  });
}
