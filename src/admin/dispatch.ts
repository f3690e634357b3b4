/** The admin command table and its dispatch; the commands themselves live in src/admin/ (credit.ts, keys.ts). */
import { type AdminCommand, AdminHelp, AdminUsageError, noArgs } from "./command.ts";
import { balance, createRedeemCodes, createRefCode, grant, referrals } from "./credit.ts";
import { audit, listKeys, revokeKey } from "./keys.ts";
import type { Config } from "../config.ts";
import { buildServices } from "../wiring.ts";
import { openStack } from "../stack.ts";
import { assertEmbeddedDataExists, checkDependencies } from "../startup.ts";

export { type AdminCommand, AdminFailedReport, AdminFailure, AdminHelp, AdminUsageError } from "./command.ts";

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
  {
    name: "balance",
    args: "<wallet>",
    summary: "a wallet's balance, locked and available credit (USD, tab-separated)",
    parse: (rest) => balance(rest),
  },
  {
    name: "keys list",
    args: "<wallet>",
    summary: "a wallet's API keys: id, label, created, revoked (tab-separated)",
    parse: (rest) => listKeys(rest),
  },
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
  {
    name: "ref-codes create",
    args: "--owner <wallet> [--code C]",
    summary: "a referral code of a referrer",
    parse: (rest) => createRefCode(rest),
  },
  {
    name: "referrals",
    args: "",
    summary: "per referrer: referred wallets, their top-ups and spend (tab-separated)",
    parse: (rest) => noArgs(rest, referrals),
  },
  {
    name: "audit",
    args: "[--fix]",
    summary: "compare Redis with Postgres for every wallet and key; exit 1 on a difference",
    details:
      "Prints the differences and totals as a table. --fix rebuilds the Redis ledger from Postgres, then audits again and exits by that.",
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
  const entry = [...COMMANDS]
    .sort((a, b) => b.name.length - a.name.length)
    .find((e) => {
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
