import type { Config } from "./config.ts";
import { formatUsd, parseUsd } from "./money.ts";
import { buildServices } from "./services.ts";
import { openStack } from "./stack.ts";

const USAGE = `usage:
  admin grant <wallet> <usd> --reason <text>   credit a wallet without a payment (recorded in Postgres)`;

/** A usage mistake: printed with the usage text, exit code 2. */
export class AdminUsageError extends Error {}

function option(args: string[], name: string): string | undefined {
  const i = args.indexOf(name);
  return i === -1 ? undefined : args[i + 1];
}

/**
 * Operator commands. They run against the same Redis and Postgres as the gateway: the configured URLs, or the
 * embedded ones in DATA_DIR (joined over their sockets when a gateway is running there, started otherwise).
 */
export async function runAdmin(config: Config, args: string[]): Promise<string> {
  const [command, ...rest] = args;
  if (command !== "grant") throw new AdminUsageError(USAGE);
  const [walletArg, usdArg] = rest;
  const reason = option(rest, "--reason");
  if (!walletArg || !/^0x[0-9a-fA-F]{40}$/.test(walletArg)) throw new AdminUsageError(`wallet must be a 0x address\n${USAGE}`);
  const amount = usdArg ? parseUsd(usdArg) : null;
  if (!amount) throw new AdminUsageError(`usd must be a positive amount with at most 6 decimals\n${USAGE}`);
  if (!reason?.trim()) throw new AdminUsageError(`--reason is required: grants are audited\n${USAGE}`);

  const stack = await openStack(config);
  const services = await buildServices(config, stack.connections);
  try {
    const wallet = walletArg.toLowerCase();
    const { id, balance } = await services.credits.add({
      eventId: `grant:${crypto.randomUUID()}`,
      wallet,
      kind: "grant",
      amountUsdc: amount,
      reason: reason.trim(),
    });
    return `granted ${formatUsd(amount)} USD to ${wallet} (credit #${id}); balance ${formatUsd(balance)} USD`;
  } finally {
    await services.close();
    await stack.stop();
  }
}
