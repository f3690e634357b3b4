/**
 * x402 `upto` for keyless calls (docs/payments.md): the payer signs a Permit2 authorization for at most the call's hold,
 * the call is served, and the chain is asked for exactly what it cost (nothing at 0).
 *
 * On the ledger the authorization is a credit of its maximum (kind 'upto') to the payer's `upto:<payer>` wallet, with an
 * upto_settles row, in one Postgres statement before anything is served; the call is held and charged there like any
 * call (under that wallet's own key). Then the credit settles down to the charge (Postgres, then Redis: credit-settle-3),
 * and the facilitator settles that amount on chain. Only `upto` calls ever spend that wallet, each bringing its own
 * credit, so no other call can take an authorization's unused rest meanwhile; at the end its balance is back to what it
 * was, the books exact: credits (the charges settled) − charges = 0. A settlement that fails, or a process killed
 * before it, stays in upto_settles and the repair job finishes it (`admin audit` lists it meanwhile); Permit2's nonce
 * makes a second settlement impossible, and a spent nonce is how a lost answer is recognised as settled.
 */
import { createHash } from "node:crypto";
import type { Address } from "viem";
import type { WalletKeys } from "../../auth/walletKeys.ts";
import type { KeyPrincipal, Ledger } from "../../ledger/ledger.ts";
import { log } from "../../log.ts";
import { getAddress, isAddress } from "../../payments/address.ts";
import { FacilitatorUnavailable } from "../../payments/facilitator.ts";
import type { LocalFacilitator } from "../../payments/local.ts";
import { fromAtomic, toAtomic } from "../../payments/networks.ts";
import { type RequirementV2, X402_UPTO_PERMIT2_PROXY } from "../../payments/requirements.ts";
import type { Credits } from "../../store/credits.ts";
import type { Sql } from "../../store/db.ts";
import type { TopupService } from "../topup/topup.service.ts";

const TX_HASH = /^0x[0-9a-fA-F]{64}$/;
const UINT = /^\d{1,78}$/;
// A row the repair job may take over: untouched this long (its own request would have finished it by far).
const STALE_S = 60;
// A `serving` row whose hold Redis never had (no marker) and Postgres never resolved is taken as never held once this
// old: far past the moment between an authorization and its reserve.
const NEVER_HELD_S = 15 * 60;

/** The settlement an `upto` call reports (PAYMENT-RESPONSE, or the stream's `: x402.settlement` comment). */
export interface UptoSettlement {
  success: boolean;
  transaction: string;
  network: string;
  payer: string;
  /** What the chain was asked for, in the asset's smallest unit. */
  amount: string;
  errorReason?: string;
}

/** An authorization verified and credited: who is held and charged, under which hold, and the row that settles it. */
export interface UptoAuthorization {
  id: string;
  principal: KeyPrincipal;
  holdId: string;
  payer: string;
}

interface Row {
  id: string;
  wallet: string;
  payer: string;
  hold_id: string;
  max_usdc: number;
  charge_usdc: number | null;
  payload: Record<string, unknown>;
  requirements: Record<string, unknown>;
  tx_hash: string | null;
}

const same = (a: unknown, b: string) => typeof a === "string" && a.toLowerCase() === b.toLowerCase();
const obj = (v: unknown): Record<string, unknown> | undefined =>
  typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;

/** Why an `upto` payment is refused before anything moves (the caller answers the 402 with it). */
export class UptoRefused extends Error {}

export class UptoCalls {
  constructor(
    private readonly sql: Sql,
    private readonly credits: Credits,
    private readonly ledger: Ledger,
    private readonly topup: TopupService,
    private readonly wallets: WalletKeys,
  ) {}

  private get facilitator(): LocalFacilitator | undefined {
    return this.topup.local;
  }

  /**
   * Checks an `upto` payment against the offered terms (`offered`, for the call's hold `micro`), has the facilitator
   * verify it, and records and applies its credit. Throws UptoRefused (nothing moved, nothing recorded).
   */
  async authorize(decoded: Record<string, unknown>, offered: RequirementV2, micro: number): Promise<UptoAuthorization> {
    const facilitator = this.facilitator;
    if (!facilitator) throw new UptoRefused("this gateway does not settle upto");
    if (decoded.x402Version !== 2) throw new UptoRefused("upto is x402 v2 only");
    const accepted = obj(decoded.accepted);
    const asset = this.topup.chain.assets.find((a) => same(offered.asset, a.address))!;
    if (
      !accepted ||
      accepted.scheme !== "upto" ||
      accepted.network !== offered.network ||
      !same(accepted.asset, offered.asset) ||
      !same(accepted.payTo, offered.payTo) ||
      typeof accepted.amount !== "string" ||
      !UINT.test(accepted.amount)
    )
      throw new UptoRefused("mismatched payment: accepted terms are not the upto terms offered for this call");
    const max = fromAtomic(BigInt(accepted.amount), asset.decimals);
    if (max === null || !Number.isSafeInteger(max) || max < micro)
      throw new UptoRefused(`the authorization's maximum is below the call's hold of ${micro} µUSDC`);
    const inner = obj(obj(decoded.payload)?.permit2Authorization);
    const signature = obj(decoded.payload)?.signature;
    const permitted = obj(inner?.permitted);
    const witness = obj(inner?.witness);
    if (!inner || typeof signature !== "string" || !permitted || !witness)
      throw new UptoRefused("mismatched payment: no Permit2 authorization");
    if (!same(inner.spender, X402_UPTO_PERMIT2_PROXY)) throw new UptoRefused("mismatched payment: spender");
    if (!same(witness.facilitator, facilitator.relayer)) throw new UptoRefused("mismatched payment: facilitator");
    if (!same(witness.to, offered.payTo) || !same(permitted.token, offered.asset) || permitted.amount !== accepted.amount)
      throw new UptoRefused("mismatched payment: recipient, token or amount");
    if (typeof inner.from !== "string" || !isAddress(inner.from)) throw new UptoRefused("invalid payer address");
    const payer = inner.from.toLowerCase();

    const requirements = { ...offered, amount: accepted.amount };
    const payload = { ...decoded, accepted: requirements };
    const verdict = await facilitator.verify(payload, requirements as unknown as Record<string, unknown>);
    if (!verdict.isValid) throw new UptoRefused(verdict.invalidReason ?? "invalid_payment");

    const id = `upto:${createHash("sha256").update(signature.toLowerCase()).digest("hex")}`;
    const wallet = `upto:${payer}`;
    const holdId = crypto.randomUUID();
    const [row] = await this.sql<{ credit_id: number }[]>`
      WITH c AS (
        INSERT INTO credits (event_id, wallet, kind, amount_usdc, reason, network, payer)
        VALUES (${id}, ${wallet}, 'upto', ${max}, ${"USDC x402 upto (pending settlement)"}, ${this.topup.chain.caip2}, ${payer})
        ON CONFLICT DO NOTHING RETURNING id
      ), u AS (
        INSERT INTO upto_settles (id, wallet, payer, hold_id, max_usdc, payload, requirements)
        SELECT ${id}, ${wallet}, ${payer}, ${holdId}, ${max}, ${this.sql.json(payload as never)}, ${this.sql.json(requirements as never)}
        FROM c RETURNING id
      )
      SELECT c.id AS credit_id FROM c, u`;
    // The same signature again: one PAYMENT-SIGNATURE serves one call.
    if (!row) throw new UptoRefused("this payment was used before");
    await this.credits.applyRecorded({ id: row.credit_id, eventId: id, wallet, amountUsdc: max });
    return { id, principal: await this.wallets.principal(wallet), holdId, payer };
  }

  /**
   * The call is over and cost `charge` (0: nothing, or the provider failed and the hold was released): the credit
   * settles down to it and the chain is asked for it. A second call for the same id (the repair job came first) only
   * reports. Never throws for a failed settlement: that stays for the repair job, and the report says so.
   */
  async settle(id: string, charge: number): Promise<UptoSettlement> {
    const [row] = await this.sql<Row[]>`
      WITH u AS (
        UPDATE upto_settles SET state = 'charged', charge_usdc = LEAST(${charge}, max_usdc), updated_at = now()
        WHERE id = ${id} AND state = 'serving' RETURNING *
      ), c AS (
        UPDATE credits SET amount_usdc = (SELECT charge_usdc FROM u) WHERE event_id = ${id} AND EXISTS (SELECT 1 FROM u) RETURNING 1
      )
      SELECT u.id, u.wallet, u.payer, u.hold_id, u.max_usdc, u.charge_usdc, u.payload, u.requirements, u.tx_hash
      FROM u, (SELECT count(*) FROM c) AS n`;
    if (!row) return this.report(id);
    return this.complete(row);
  }

  /** What became of an id another run settles (or settled). */
  private async report(id: string): Promise<UptoSettlement> {
    const [r] = await this.sql<{ payer: string; charge_usdc: number | null; tx_hash: string | null; state: string }[]>`
      SELECT payer, charge_usdc, tx_hash, state FROM upto_settles WHERE id = ${id}`;
    return {
      success: r?.state === "settled",
      transaction: r?.tx_hash ?? "",
      network: this.topup.chain.caip2,
      payer: r?.payer ?? "",
      amount: String(r?.charge_usdc ?? 0),
      ...(r?.state === "settled" ? {} : { errorReason: "settlement_pending" }),
    };
  }

  /** A row whose charge is recorded: the ledger side (idempotent), then the chain, then the row closed. */
  private async complete(row: Row): Promise<UptoSettlement> {
    const charge = Number(row.charge_usdc);
    const network = this.topup.chain.caip2;
    const base = { network, payer: row.payer };
    await this.ledger.settleCredit(row.wallet, row.id, Number(row.max_usdc), charge);
    if (charge === 0) {
      await this.sql`UPDATE upto_settles SET state = 'settled', updated_at = now() WHERE id = ${row.id}`;
      return { ...base, success: true, transaction: "", amount: "0" };
    }
    const asset = this.topup.chain.assets.find((a) => same(row.requirements.asset, a.address))!;
    const amount = toAtomic(charge, asset.decimals)!.toString();
    const facilitator = this.facilitator!;
    const auth = obj(obj(row.payload.payload)?.permit2Authorization)!;
    let tx = "";
    let reason: string | undefined;
    try {
      // Already spent (a settlement whose answer was lost, or a run that died after sending it): settled.
      if (row.tx_hash || (await facilitator.permit2NonceUsed(getAddress(String(auth.from)) as Address, BigInt(String(auth.nonce))))) {
        tx = row.tx_hash ?? "";
      } else {
        const r = await facilitator.settle(row.payload, { ...row.requirements, amount });
        if (r.success && TX_HASH.test(r.transaction)) tx = r.transaction.toLowerCase();
        else reason = r.errorReason ?? "settlement_failed";
      }
    } catch (e) {
      reason = e instanceof Error ? e.message : String(e);
      if (e instanceof FacilitatorUnavailable && e.transaction) {
        await this.sql`UPDATE upto_settles SET tx_hash = ${e.transaction.toLowerCase()} WHERE id = ${row.id}`;
      }
    }
    if (reason !== undefined) {
      log.warn("upto settlement failed; kept for the repair job", { id: row.id, payer: row.payer, charge_usdc: charge, reason });
      await this.sql`
        UPDATE upto_settles SET attempts = attempts + 1, last_error = ${reason.slice(0, 500)}, updated_at = now() WHERE id = ${row.id}`;
      return { ...base, success: false, transaction: "", amount, errorReason: "settlement_pending" };
    }
    await this.sql`
      WITH u AS (
        UPDATE upto_settles SET state = 'settled', tx_hash = ${tx || null}, attempts = attempts + 1, updated_at = now()
        WHERE id = ${row.id} RETURNING id
      )
      UPDATE credits SET tx_hash = ${tx || null} WHERE event_id = ${row.id} AND ${tx !== ""}`;
    log.info("upto settled", { id: row.id, payer: row.payer, charge_usdc: charge, tx_hash: tx });
    return { ...base, success: true, transaction: tx, amount };
  }

  /**
   * The repair job: rows left by a request that died or whose settlement failed, untouched for `staleS`. A row still
   * `serving` takes its charge from its hold's outcome in Postgres (a charge, or 0 for a release or an expiry; a hold
   * not resolved there yet waits); a `charged` row is settled again. Returns how many were settled now.
   */
  async recover(staleS = STALE_S): Promise<number> {
    if (!this.facilitator) return 0;
    let done = 0;
    // A hold's outcome: its charge in ledger_events (or still deferred in pending_settles), or its release/expiry.
    const serving = await this.sql<
      { id: string; wallet: string; hold_id: string; charge: number | null; resolved: boolean; old: boolean }[]
    >`
      SELECT u.id, u.wallet, u.hold_id,
             COALESCE((SELECT e.amount_usdc FROM ledger_events e WHERE e.hold_id = u.hold_id AND e.type = 'charge' LIMIT 1),
                      (SELECT p.charge_usdc FROM pending_settles p WHERE p.hold_id = u.hold_id)) AS charge,
             EXISTS (SELECT 1 FROM ledger_events e WHERE e.hold_id = u.hold_id)
               OR EXISTS (SELECT 1 FROM pending_settles p WHERE p.hold_id = u.hold_id) AS resolved,
             u.created_at < now() - make_interval(secs => ${NEVER_HELD_S}) AS old
      FROM upto_settles u
      WHERE u.state = 'serving' AND u.updated_at < now() - make_interval(secs => ${staleS})
      ORDER BY u.created_at LIMIT 100`;
    for (const s of serving) {
      // Not resolved in Postgres: a hold still live, or resolved with its event on its way, waits (its marker says
      // so); one never taken (the request died between its authorization and its reserve) cost nothing.
      if (!s.resolved) {
        const names = this.ledger.names;
        const marker = await this.ledger.redis.get(names.holdMarker(names.shardOf(s.wallet), s.hold_id));
        if (marker !== null || !s.old) continue;
      }
      if ((await this.settle(s.id, Number(s.charge ?? 0))).success) done++;
    }
    const charged = await this.sql<Row[]>`
      UPDATE upto_settles SET updated_at = now()
      WHERE id IN (
        SELECT id FROM upto_settles WHERE state = 'charged' AND updated_at < now() - make_interval(secs => ${staleS})
        ORDER BY created_at LIMIT 100
      ) AND state = 'charged'
      RETURNING id, wallet, payer, hold_id, max_usdc, charge_usdc, payload, requirements, tx_hash`;
    for (const row of charged) if ((await this.complete(row)).success) done++;
    return done;
  }
}
