/** Admin commands about API keys and the ledger's health: list and revoke keys, audit Redis against Postgres. */
import { runAudit } from "../audit/audit.ts";
import { AdminFailedReport, AdminFailure, AdminUsageError, type AdminCommand, noArgs, walletArg } from "./command.ts";

/** A wallet's keys, revoked ones included (tab-separated). */
export function listKeys(rest: string[]): AdminCommand {
  const [walletArgument, ...more] = rest;
  const wallet = walletArg(walletArgument);
  return noArgs(more, async (s) => {
    const lines = ["id\tlabel\tcreated_at\trevoked_at"];
    for (const k of await s.keys.list(wallet)) lines.push([k.id, k.label, k.created_at, k.revoked_at ?? "-"].join("\t"));
    return lines.join("\n");
  });
}

/** Through KeyService, like DELETE /v1/auth/keys/{id}: Postgres first (the record), then Redis (what reserve checks). */
export function revokeKey(rest: string[]): AdminCommand {
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

/** Redis vs Postgres, wallet by wallet and key by key (src/audit/audit.ts); differences exit 1. */
export function audit(rest: string[]): AdminCommand {
  const fix = rest[0] === "--fix";
  const extra = rest.slice(fix ? 1 : 0);
  if (extra.length > 0) throw new AdminUsageError(`unexpected argument "${extra[0]}"`);
  return async (s) => {
    const r = await runAudit(s, { fix });
    if (!r.clean) throw new AdminFailedReport(r.output);
    return r.output;
  };
}
