import type { Redis } from "ioredis";
import { generateApiKey, hashApiKey } from "../../auth/apiKeys.ts";
import { ApiError } from "../../errors.ts";
import type { Ledger } from "../../ledger/ledger.ts";
import type { Sql } from "../../store/db.ts";
import { writeKeyState } from "../../store/rebuild.ts";

export interface CreateKeyInput {
  label?: string;
  budget_usdc?: number;
  ref_code?: string;
  redeem_code?: string;
}

interface KeyRow {
  id: number;
  label: string;
  created_at: Date;
  revoked_at: Date | null;
}

/**
 * API key life cycle. Postgres is written first (the record), then Redis (the state reserve-6 checks), so a
 * crash in between leaves a key that the auth path repairs, or a revoke that a retried DELETE completes.
 */
export class KeyService {
  constructor(
    private readonly sql: Sql,
    private readonly redis: Redis,
    private readonly ledger: Ledger,
  ) {}

  async create(wallet: string, input: CreateKeyInput) {
    if (input.redeem_code !== undefined || input.ref_code !== undefined) {
      // Codes are issued by the operator's admin commands; none exists until then, so any code is unknown.
      throw new ApiError("VALIDATION_ERROR", input.redeem_code !== undefined ? "Unknown or used redeem_code" : "Unknown ref_code");
    }
    const key = generateApiKey();
    const hash = hashApiKey(key);
    const [row] = await this.sql<KeyRow[]>`
      INSERT INTO api_keys (wallet, key_hash, label, budget_usdc)
      VALUES (${wallet}, ${hash}, ${input.label ?? ""}, ${input.budget_usdc ?? null})
      RETURNING id, label, created_at, revoked_at`;
    const p = this.ledger.principal(row!.id, wallet);
    await this.redis
      .multi()
      .hset(p.apiKeyKey, writeKeyState(false, input.budget_usdc ?? null))
      .set(this.ledger.keys.keyHash(hash), `${row!.id}|${wallet}`)
      .exec();
    return { id: row!.id, key, label: row!.label, created_at: row!.created_at.toISOString() };
  }

  async list(wallet: string) {
    const rows = await this.sql<KeyRow[]>`
      SELECT id, label, created_at, revoked_at FROM api_keys WHERE wallet = ${wallet} ORDER BY id`;
    return rows.map((r) => ({
      id: r.id,
      label: r.label,
      created_at: r.created_at.toISOString(),
      revoked_at: r.revoked_at?.toISOString() ?? null,
    }));
  }

  /** Revokes a key of this wallet; revoking a revoked key again succeeds (and re-asserts Redis). 404 otherwise. */
  async revoke(wallet: string, keyId: number): Promise<void> {
    const [row] = await this.sql<{ id: number }[]>`
      UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now())
      WHERE id = ${keyId} AND wallet = ${wallet} RETURNING id`;
    if (!row) throw new ApiError("NOT_FOUND", "No such API key for this wallet");
    await this.redis.hset(this.ledger.principal(keyId, wallet).apiKeyKey, "revoked", "1");
  }
}
