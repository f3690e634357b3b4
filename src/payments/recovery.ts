import type { Address, Hex } from "viem";
import { getAddress } from "./address.ts";
import type { PaymentsConfig } from "./config.ts";
import { log, redactText } from "../log.ts";
import type { Credits } from "../store/credits.ts";
import type { Sql } from "../store/db.ts";
import type { TransferMethod } from "./networks.ts";
import type { MatchedPayment } from "./payment.ts";
import type * as ChainModule from "./chain.ts";
import { topupEventId } from "./topupId.ts";
import { withDeadline } from "../deadline.ts";

// Log searches go back in windows small enough for public RPCs, and not further than a week of Base blocks.
const LOG_WINDOW = 10_000n;
const MAX_LOOKBACK = 302_400n;
// A dead authorization is voided only once the chain's clock is past validBefore by this much (reorg margin).
const VOID_MARGIN_S = 120n;
const BATCH = 50;

interface CheckRow {
  id: number;
  network: string;
  asset: string;
  payer: string;
  pay_to: string;
  amount_usdc: number;
  atomic: string;
  method: TransferMethod;
  nonce: string | null;
  valid_before: number | null;
  tx_hash: string | null;
  from_block: number | null;
  /** The wallet to credit when it is not the payer (a paid call credits the key's owner). */
  wallet: string | null;
}

/** Who a check credits, and whether it is opened before settling (the normal case, so it is not logged). */
export interface CheckTarget {
  wallet?: string;
  beforeSettle?: boolean;
}

/**
 * Payments whose settlement the gateway could not confirm (facilitator timeout, unreachable chain, or a failure
 * answer after a transaction may have been sent) are not given up: `open` records them, and `checkPending` asks
 * the chain later. EIP-3009: the token's `authorizationState` says whether the authorization was used, and its
 * `AuthorizationUsed` log names the transaction; a used one is credited through the same idempotent credit as a
 * normal top-up (event id by transaction), so a payment credits once whichever path sees it first. An
 * authorization that is unused past its validBefore can never move money and is voided. Permit: the relayer's
 * transferFrom receipt decides; Permit2 likewise, its proxy transaction's receipt (recorded as method `permit`). Needs RPC_URL; without it the checks wait in Postgres for an operator.
 */
export class PaymentRecovery {
  /** The chain client and its ABI (chain.ts, viem), loaded once RPC_URL is known to be set. */
  private chainLoaded?: Promise<Chain>;

  constructor(
    private readonly cfg: PaymentsConfig,
    private readonly sql: Sql,
    private readonly credits: Credits,
  ) {
    // Loaded now, so the first payment does not wait for it; a failure shows on first use.
    if (cfg.rpcUrl) this.chain().catch(() => {});
  }

  private chain(): Promise<Chain> {
    const rpcUrl = this.cfg.rpcUrl!;
    return (this.chainLoaded ??= import("./chain.ts").then((m) => ({ m, client: m.chainClient(rpcUrl, this.cfg.facilitatorTimeoutMs) })));
  }

  /** The chain's height now (undefined without RPC_URL or when it does not answer within 2 s). */
  async height(): Promise<bigint | undefined> {
    if (!this.cfg.rpcUrl) return undefined;
    const { client } = await this.chain();
    return withDeadline(
      2_000,
      () => client.getBlockNumber({ cacheTime: 0 }),
      () => new Error("RPC_URL: no block number within 2 s"),
    ).catch(() => undefined);
  }

  /**
   * Opens a check for a payment whose outcome is unknown; `fromBlock` is the height before settle was asked (the
   * log search starts there). Never throws: the error log then carries the details.
   */
  async open(
    p: MatchedPayment,
    microUsdc: number,
    rawReason: string,
    fromBlock: bigint | undefined,
    transaction?: string,
    target: CheckTarget = {},
  ): Promise<void> {
    // The reason quotes errors that can name RPC_URL, whose path carries the node provider's API key.
    const reason = redactText(rawReason).slice(0, 300);
    const auth = p.kind === "eip3009" ? p.inner.authorization : undefined;
    const tx = transaction && /^0x[0-9a-fA-F]{64}$/.test(transaction) ? transaction.toLowerCase() : null;
    if (!auth && !tx) {
      // A permit whose transferFrom was never sent moved nothing (the allowance alone pays no one); nor did a
      // Permit2 payment whose settlement transaction was never signed.
      return;
    }
    try {
      await this.sql`
        INSERT INTO payment_checks (network, asset, payer, pay_to, amount_usdc, atomic, method, nonce, valid_before, tx_hash, from_block,
                                    reason, wallet)
        VALUES (${this.cfg.chain.caip2}, ${p.requirement.asset.address.toLowerCase()}, ${p.payer}, ${String(p.requirement.v2.payTo).toLowerCase()},
                ${microUsdc}, ${p.requirement.atomic.toString()}, ${p.kind === "eip3009" ? "eip3009" : "permit"}, ${auth?.nonce.toLowerCase() ?? null},
                ${auth ? Number(auth.validBefore) : null}, ${tx}, ${fromBlock === undefined ? null : Number(fromBlock)}, ${reason},
                ${target.wallet && target.wallet !== p.payer ? target.wallet : null})
        ON CONFLICT DO NOTHING`;
      if (!target.beforeSettle)
        log.warn("payment outcome unknown; opened a check to credit it if it settles", { payer: p.payer, reason, tx_hash: tx });
    } catch (e) {
      log.error("PAYMENT OUTCOME UNKNOWN AND NOT RECORDED: check the chain and grant by hand", {
        payer: p.payer,
        asset: p.requirement.asset.address,
        amount_usdc: microUsdc,
        nonce: auth?.nonce,
        tx_hash: tx,
        reason,
        error: e,
      });
    }
  }

  /**
   * The request that opened a check before settling has credited its payment (by `tx`): the check is closed, so the
   * job need not ask the chain. Should this fail, the job finds the transfer and its credit is a duplicate (no-op).
   */
  async credited(p: MatchedPayment, tx: string): Promise<void> {
    if (p.kind !== "eip3009") return;
    const a = p.inner.authorization;
    await this.sql`
      UPDATE payment_checks SET state = 'credited', reason = reason || '; credited by its request', tx_hash = COALESCE(tx_hash, ${tx}),
             resolved_at = now()
      WHERE asset = ${p.requirement.asset.address.toLowerCase()} AND payer = ${p.payer} AND nonce = ${a.nonce.toLowerCase()}
        AND state = 'pending'`.catch((e) => log.warn("could not close a payment check after its credit; the job closes it", { error: e }));
  }

  /** Settles what the chain now knows about open checks; returns how many were closed. */
  async checkPending(): Promise<number> {
    if (!this.cfg.rpcUrl) return 0;
    const rows = await this.sql<CheckRow[]>`
      SELECT id, network, asset, payer, pay_to, amount_usdc, atomic, method, nonce, valid_before, tx_hash, from_block, wallet
      FROM payment_checks WHERE state = 'pending' ORDER BY last_checked_at NULLS FIRST, id LIMIT ${BATCH}`;
    let closed = 0;
    for (const row of rows) {
      await this.sql`UPDATE payment_checks SET last_checked_at = now() WHERE id = ${row.id}`;
      try {
        const outcome = row.method === "eip3009" ? await this.eip3009Outcome(row) : await this.receiptOutcome(row, row.tx_hash as Hex);
        if (outcome.kind === "pending") continue;
        if (outcome.kind === "moved") await this.creditMoved(row, outcome.tx);
        else await this.close(row.id, "void", outcome.why);
        closed++;
      } catch (e) {
        log.warn("payment check could not be completed; it stays open", { check: row.id, error: e });
      }
    }
    return closed;
  }

  private async eip3009Outcome(row: CheckRow): Promise<Outcome> {
    const { client, m } = await this.chain();
    const asset = getAddress(row.asset);
    const authorizer = getAddress(row.payer);
    const nonce = row.nonce as Hex;
    const used = await client.readContract({
      address: asset,
      abi: m.tokenAbi,
      functionName: "authorizationState",
      args: [authorizer, nonce],
    });
    if (!used) {
      const block = await client.getBlock({ blockTag: "latest" });
      if (row.valid_before !== null && block.timestamp > BigInt(row.valid_before) + VOID_MARGIN_S) {
        return { kind: "void", why: "authorization expired unused" };
      }
      return { kind: "pending" };
    }
    // Used (or cancelled by its signer): the AuthorizationUsed log names the transfer's transaction.
    const latest = await client.getBlockNumber({ cacheTime: 0 });
    const floor = row.from_block !== null ? BigInt(row.from_block) : latest > MAX_LOOKBACK ? latest - MAX_LOOKBACK : 0n;
    for (let to = latest; to >= floor; to -= LOG_WINDOW) {
      const from = to - LOG_WINDOW + 1n > floor ? to - LOG_WINDOW + 1n : floor;
      const logs = await client.getLogs({
        address: asset,
        event: m.AUTHORIZATION_USED,
        args: { authorizer, nonce },
        fromBlock: from,
        toBlock: to,
      });
      const hit = logs.find((l) => !l.removed);
      if (hit?.transactionHash) return this.receiptOutcome(row, hit.transactionHash);
      if (from === floor) break;
    }
    // A cancelled authorization moved nothing; a used one whose log is out of reach needs an operator.
    log.error("authorization is used but its AuthorizationUsed log was not found; check by hand", {
      check: row.id,
      payer: row.payer,
      nonce: row.nonce,
    });
    return { kind: "pending" };
  }

  /** A transfer transaction's receipt: success with the expected Transfer log is money in; reverted is void. */
  private async receiptOutcome(row: CheckRow, tx: Hex): Promise<Outcome> {
    const { client, m } = await this.chain();
    const receipt = await client.getTransactionReceipt({ hash: tx }).catch((e: Error) => {
      if (e.name === "TransactionReceiptNotFoundError") return undefined;
      throw e;
    });
    if (!receipt) return { kind: "pending" };
    if (receipt.status !== "success") return { kind: "void", why: `transaction ${tx} reverted` };
    if (!m.transferred(receipt.logs, row.asset as Address, row.payer as Address, row.pay_to as Address, BigInt(row.atomic)))
      return { kind: "void", why: `transaction ${tx} did not transfer the payment to PAY_TO` };
    return { kind: "moved", tx: tx.toLowerCase() };
  }

  private async creditMoved(row: CheckRow, tx: string): Promise<void> {
    const wallet = row.wallet ?? row.payer;
    const r = await this.credits.addSettled({
      eventId: topupEventId(row.network, tx),
      wallet,
      kind: "topup",
      amountUsdc: row.amount_usdc,
      txHash: tx,
      network: row.network,
      reason: `recovered ${row.method} payment (check ${row.id})`,
      payer: row.payer,
    });
    await this.close(row.id, "credited", r.duplicate ? `settled in ${tx}, already credited` : `settled in ${tx}, credited`, tx);
    if (!r.duplicate)
      log.warn("payment recovered from the chain and credited", {
        check: row.id,
        wallet,
        amount_usdc: row.amount_usdc,
        tx_hash: tx,
      });
  }

  private async close(id: number, state: "credited" | "void", why: string, tx?: string): Promise<void> {
    await this.sql`
      UPDATE payment_checks SET state = ${state}, reason = reason || '; ' || ${why}, tx_hash = COALESCE(tx_hash, ${tx ?? null}),
             resolved_at = now()
      WHERE id = ${id} AND state = 'pending'`;
  }
}

type Chain = { m: typeof ChainModule; client: ReturnType<typeof ChainModule.chainClient> };

type Outcome = { kind: "pending" } | { kind: "void"; why: string } | { kind: "moved"; tx: string };
