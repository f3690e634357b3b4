import { createHash } from "node:crypto";
import { BareError } from "../errors.ts";
import { log } from "../log.ts";
import type { Sql } from "../store/db.ts";
import { PAYMENT_IDENTIFIER } from "./requirements.ts";

// x402 payment-identifier: 16–128 letters, digits, hyphens, underscores.
const ID = /^[A-Za-z0-9_-]{16,128}$/;
// A claim left pending this long belongs to a request that died (kill -9): a resend may take it over. Longer than a
// facilitator's verify + settle under their deadlines.
const STALE_S = 600;

/** A run under a payment id: its own value, or the first run's kept result (a resend). */
export type Once<T> = { fresh: T } | { replay: Record<string, unknown> };

/** What a claim on a payment id found. */
export type IdClaim =
  | { kind: "new" }
  | { kind: "done"; result: Record<string, unknown> }
  /** The id names another payload (409). */
  | { kind: "conflict" }
  /** The first request with this id is still being served (409, retry later). */
  | { kind: "busy" };

/** The payment-identifier id of a decoded payment payload, if it names one; 400 when it names a malformed one. */
export function paymentIdOf(decoded: Record<string, unknown>): string | undefined {
  const ext = (decoded.extensions as Record<string, unknown> | undefined)?.[PAYMENT_IDENTIFIER] as { info?: { id?: unknown } } | undefined;
  const id = ext?.info?.id;
  if (id === undefined || id === null) return undefined;
  if (typeof id !== "string" || !ID.test(id)) throw new BareError(400, "invalid payment identifier: 16-128 letters, digits, - or _");
  return id;
}

/** The exact payload an id is bound to (the spec binds a resend to it, not to a looser fingerprint). */
export function fingerprintOf(decoded: Record<string, unknown>): string {
  return createHash("sha256").update(JSON.stringify(decoded)).digest("hex");
}

/**
 * x402 payment-identifier idempotency, kept in Postgres (payment_ids): the first request with an id claims it for its
 * payload; a resend of that payload gets the first result and moves no money; another payload under the id is a
 * conflict. A payment that moved nothing (refused, failed) gives its id back, so the client may try again with it.
 */
export class PaymentIds {
  constructor(private readonly sql: Sql) {}

  async claim(scope: string, id: string, fingerprint: string): Promise<IdClaim> {
    const [mine] = await this.sql`
      INSERT INTO payment_ids (scope, id, fingerprint) VALUES (${scope}, ${id}, ${fingerprint})
      ON CONFLICT DO NOTHING RETURNING 1 AS claimed`;
    if (mine) return { kind: "new" };
    const [row] = await this.sql<{ fingerprint: string; state: string; result: Record<string, unknown> | null; stale: boolean }[]>`
      SELECT fingerprint, state, result, created_at < now() - make_interval(secs => ${STALE_S}) AS stale
      FROM payment_ids WHERE scope = ${scope} AND id = ${id}`;
    if (!row) return this.claim(scope, id, fingerprint); // given back in between
    if (row.fingerprint !== fingerprint) return { kind: "conflict" };
    if (row.state === "done" && row.result) return { kind: "done", result: row.result };
    if (!row.stale) return { kind: "busy" };
    const [taken] = await this.sql`
      UPDATE payment_ids SET created_at = now()
      WHERE scope = ${scope} AND id = ${id} AND state = 'pending' AND created_at < now() - make_interval(secs => ${STALE_S})
      RETURNING 1 AS claimed`;
    return taken ? { kind: "new" } : { kind: "busy" };
  }

  /** The first result, for resends. */
  async finish(scope: string, id: string, result: Record<string, unknown>): Promise<void> {
    await this.sql`UPDATE payment_ids SET state = 'done', result = ${this.sql.json(result as never)} WHERE scope = ${scope} AND id = ${id}`;
  }

  /** Nothing moved: the id is free again. */
  async release(scope: string, id: string): Promise<void> {
    await this.sql`DELETE FROM payment_ids WHERE scope = ${scope} AND id = ${id} AND state = 'pending'`;
  }

  /**
   * x402 payment-identifier: with an id in the payload, the first request runs (`run`) and what `keep` makes of its
   * value is stored; a resend of the same payload gets that back (`replay`) and moves no money; another payload
   * under the id is 409. A run that moved nothing (`keep` gives undefined, or it threw) frees the id again.
   * `scope` separates where ids live (the top-up route, each wallet's paid calls).
   */
  async once<T>(
    scope: string,
    decoded: Record<string, unknown>,
    run: () => Promise<T>,
    keep: (value: T) => Record<string, unknown> | undefined,
  ): Promise<Once<T>> {
    const id = paymentIdOf(decoded);
    if (id === undefined) return { fresh: await run() };
    const claim = await this.claim(scope, id, fingerprintOf(decoded));
    if (claim.kind === "conflict") throw new BareError(409, "payment identifier already names another payment");
    if (claim.kind === "busy") throw new BareError(409, "payment identifier in use by a request still being served; retry shortly");
    if (claim.kind === "done") return { replay: claim.result };
    let value: T;
    try {
      value = await run();
    } catch (e) {
      await this.release(scope, id).catch(() => undefined);
      throw e;
    }
    const result = keep(value);
    // The payment's own outcome stands whatever happens here: an id left pending is taken over after it goes stale.
    await (result ? this.finish(scope, id, result) : this.release(scope, id)).catch((e) =>
      log.warn("payment identifier not updated; a resend waits until it goes stale", { error: e }),
    );
    return { fresh: value };
  }
}
