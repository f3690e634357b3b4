import init from "../../migrations/001_init.sql" with { type: "text" };
import topupsCodes from "../../migrations/002_topups_codes.sql" with { type: "text" };
import paymentChecks from "../../migrations/003_payment_checks.sql" with { type: "text" };
import pendingSettles from "../../migrations/004_pending_settles.sql" with { type: "text" };
import unresolved from "../../migrations/005_unresolved_and_check_order.sql" with { type: "text" };
import paidCalls from "../../migrations/006_paid_calls.sql" with { type: "text" };
import leasedSettles from "../../migrations/007_leased_settles.sql" with { type: "text" };
import keyLimits from "../../migrations/008_key_limits.sql" with { type: "text" };
import cacheTokens from "../../migrations/009_cache_tokens.sql" with { type: "text" };
import uptoSettles from "../../migrations/010_upto_settles.sql" with { type: "text" };
import type { Sql } from "./db.ts";

/** Every migration in order, imported as text so a compiled binary carries them (a test checks the folder). */
export const MIGRATIONS: [name: string, sql: string][] = [
  ["001_init.sql", init],
  ["002_topups_codes.sql", topupsCodes],
  ["003_payment_checks.sql", paymentChecks],
  ["004_pending_settles.sql", pendingSettles],
  ["005_unresolved_and_check_order.sql", unresolved],
  ["006_paid_calls.sql", paidCalls],
  ["007_leased_settles.sql", leasedSettles],
  ["008_key_limits.sql", keyLimits],
  ["009_cache_tokens.sql", cacheTokens],
  ["010_upto_settles.sql", uptoSettles],
];

/** Applies migrations/NNN_name.sql in order, each once, each in its own transaction; safe to run at every start. */
export async function migrate(sql: Sql): Promise<string[]> {
  await sql`CREATE TABLE IF NOT EXISTS schema_migrations (version TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`;
  const done = new Set((await sql<{ version: string }[]>`SELECT version FROM schema_migrations`).map((r) => r.version));
  const applied: string[] = [];
  for (const [file, text] of MIGRATIONS) {
    if (done.has(file)) continue;
    await sql.begin(async (tx) => {
      // Serialises concurrent starters: the second waits, then finds the version recorded and skips.
      await tx`LOCK TABLE schema_migrations IN EXCLUSIVE MODE`;
      const [again] = await tx`SELECT 1 FROM schema_migrations WHERE version = ${file}`;
      if (again) return;
      await tx.unsafe(text);
      await tx`INSERT INTO schema_migrations (version) VALUES (${file})`;
      applied.push(file);
    });
  }
  return applied;
}
