/** The admin command table and its dispatch; the commands themselves live in src/admin/ (credit.ts, keys.ts). */
import { type AdminCommand, AdminHelp, AdminUsageError, noArgs } from "./command.ts";
import { balance, createRedeemCodes, createRefCode, grant, referrals } from "./credit.ts";
import { audit, listKeys, revokeKey } from "./keys.ts";
import type { Config } from "../config.ts";
import { buildServices } from "../wiring.ts";
import { openStack } from "../stack.ts";
import { assertEmbeddedDataExists, checkDependencies } from "../startup.ts";
import { servedNeighbours, servingPid } from "../embedded/servedBy.ts";
import { AdminFailure } from "./command.ts";

export { type AdminCommand, AdminFailedReport, AdminFailure, AdminHelp, AdminUsageError } from "./command.ts";

/** One admin command: its words, its arguments, what it does, and its parser (which validates before anything opens). */
interface AdminEntry {
  name: string;
  args: string;
  summary: string;
  /** More lines for `admin <name> --help`. */
  details?: string;
  /** Reads or changes one wallet's credit or keys: refused on a data directory no gateway serves while one next to it is served. */
  wallet?: boolean;
  parse(rest: string[]): AdminCommand;
}

/** Every admin command. Adding one is adding an entry (with its parser): dispatch and help follow from the table. */
const COMMANDS: AdminEntry[] = [
  {
    name: "grant",
    wallet: true,
    args: "<wallet> <usd> --reason <text> [--id ID]",
    summary: "credit a wallet without a payment (recorded in Postgres)",
    details: "With --id, running it again never grants twice (an operator retrying after a timeout).",
    parse: (rest) => grant(rest),
  },
  {
    name: "balance",
    wallet: true,
    args: "<wallet>",
    summary: "a wallet's balance, locked and available credit (USD, tab-separated)",
    parse: (rest) => balance(rest),
  },
  {
    name: "keys list",
    wallet: true,
    args: "<wallet>",
    summary: "a wallet's API keys: id, label, created, revoked (tab-separated)",
    parse: (rest) => listKeys(rest),
  },
  {
    name: "keys revoke",
    wallet: true,
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
export async function runAdmin(config: Config, args: string[], say: (line: string) => void): Promise<string> {
  const command = parseAdmin(args);
  const embeddedRedis = !config.redisUrl && !config.redisCluster;
  const pid = embeddedRedis ? servingPid(config.dataDir) : undefined;
  if (embeddedRedis && pid === undefined && findEntry(args)?.wallet) {
    const other = servedNeighbours(config.dataDir)[0];
    if (other)
      throw new AdminFailure(
        `no gateway serves DATA_DIR=${config.dataDir}, but the gateway with pid ${other.pid} serves ${other.dataDir}: set DATA_DIR=${other.dataDir} to work on its ledger (refused, so as not to read or change a ledger no gateway uses)`,
      );
  }
  assertEmbeddedDataExists(config);
  say(`ledger: ${ledgerOf(config, pid)}`);
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

/** Where an admin command reads and writes, said on stderr before it runs (the answer alone goes to stdout). */
function ledgerOf(config: Config, servedBy: number | undefined): string {
  const dir = `DATA_DIR=${config.dataDir}`;
  const redis = config.redisCluster
    ? `Redis Cluster ${config.redisCluster.cluster.map((n) => `${n.host}:${n.port}`).join(",")}`
    : config.redisUrl
      ? `Redis at ${new URL(config.redisUrl).host}`
      : undefined;
  const postgres = config.databaseUrl
    ? `Postgres at ${new URL(config.databaseUrl).host}${new URL(config.databaseUrl).pathname}`
    : undefined;
  const external = [redis, postgres].filter(Boolean).join(", ");
  if (redis && postgres) return external;
  if (redis) return `${redis}; Postgres embedded in ${dir}`;
  const embedded =
    servedBy !== undefined
      ? `${dir}, served by the running gateway (pid ${servedBy})`
      : `${dir}, which no running gateway serves (its embedded services start for this command)`;
  return external ? `${external}; ${embedded}` : embedded;
}

/** The command the arguments name, by its words (the longest name first: "keys list" before "keys"). */
function findEntry(args: string[]): AdminEntry | undefined {
  return [...COMMANDS]
    .sort((a, b) => b.name.length - a.name.length)
    .find((e) => {
      const words = e.name.split(" ");
      return words.every((w, i) => args[i] === w);
    });
}

/** Validates the arguments and returns the command; AdminHelp for --help, AdminUsageError for a mistake. */
export function parseAdmin(args: string[]): AdminCommand {
  const entry = findEntry(args);
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
