/**
 * What an admin command is: a parser that validates its arguments before anything opens and returns the work
 * to run against the services; the errors that decide its exit code; and the argument helpers the parsers share.
 */
import type { Services } from "../wiring.ts";

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

const WALLET = /^0x[0-9a-fA-F]{40}$/;

/** The value after `--name`, if given. */
export function option(args: string[], name: string): string | undefined {
  const i = args.indexOf(name);
  return i === -1 ? undefined : args[i + 1];
}

/** `command`, once no argument is left over (a stray one is a mistake, not something to ignore). */
export function noArgs(rest: string[], command: AdminCommand): AdminCommand {
  if (rest.length > 0) throw new AdminUsageError(`unexpected argument "${rest[0]}"`);
  return command;
}

/** A wallet address argument, lower-cased as the ledger keys it. */
export function walletArg(value: string | undefined, what = "wallet"): string {
  if (!value || !WALLET.test(value)) throw new AdminUsageError(`${what} must be a 0x address`);
  return value.toLowerCase();
}
