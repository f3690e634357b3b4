/**
 * The reference model of the Redis Lua ledger (TigerBeetle's reference_model): plain in-memory state of wallets,
 * API keys, holds, credit ids and outbox events, and what each operation must answer given it. It knows nothing of
 * Redis; the workload (workload.ts) applies every operation to both, and the test compares them.
 */
import type { KeyPrincipal } from "../../src/ledger/ledger.ts";
import type { RedisNames } from "../../src/ledger/names.ts";

export interface WalletM {
  addr: string;
  shard: string;
  credits: number; // Σ credits applied
  charges: number; // Σ charges posted
}
export interface KeyM {
  id: number;
  wallet: WalletM;
  p: KeyPrincipal;
  revoked: boolean;
  budget: number | null;
  spent: number;
  requests: number;
  pt: number;
  ct: number;
  revenue: number;
}
export type HoldState = "live" | "settled" | "released" | "expired";
export interface HoldM {
  id: string;
  key: KeyM;
  amount: number;
  state: HoldState;
  /** The sweeper expired it at some point (a late settle may have followed). */
  expiredOnce?: boolean;
}
export interface EventM {
  type: "charge" | "release" | "expire";
  hold: string;
  wallet: string;
  key: string;
  amount: string;
  model?: string;
  cost?: string;
  pt?: string;
  ct?: string;
  /** The charge's cache split (reads, 5-minute and 1-hour writes), only when one of them is not 0. */
  cr?: string;
  cw?: string;
  cw1h?: string;
}

/** A credit lease (lease-8): a hold whose lock moves; never settled, only closed (released) or expired. */
export interface LeaseM {
  id: string;
  key: KeyM;
  amount: number;
  state: "live" | "released" | "expired";
}

/** What reserve must answer, in the model's terms. */
export type ExpectedReserve =
  | { ok: true; available: number; fresh: boolean }
  | { ok: false; code: "UNAUTHORIZED" | "HOLD_RESOLVED" | "KEY_BUDGET_EXCEEDED" | "INSUFFICIENT_BALANCE"; extra?: Record<string, number> };

/** What a settle does, in the model's terms: whether it posts a charge, and the state the hold was in. */
export interface ExpectedSettle {
  posts: boolean;
  was: HoldState;
}

/** One settle's usage figures, as the ledger records them beside the charge. */
export interface SettleUsage {
  pt: number;
  ct: number;
  cost: number;
  /** Of pt: read from the provider's cache, written to it for 5 minutes, for 1 hour (absent: 0). */
  cr?: number;
  cw?: number;
  cw1h?: number;
}

const MODEL = "m/model";

/**
 * A fresh model: wallets whose last 4 hex digits pick their shards (two share shard 1, so they share holds/outbox/
 * credited). Every rule of the ledger lives here, as an operation that says what the ledger must answer and applies
 * its effect to the model; the workload only chooses operations, runs them on both and compares.
 */
export function referenceModel(names: RedisNames, pick: <T>(xs: readonly T[]) => T) {
  const wallets: WalletM[] = ["0000", "0001", "0005", "0002", "0007"].map((tail, i) => {
    const addr = `0x${String(i + 1).padStart(36, "a")}${tail}`;
    return { addr, shard: names.shardOf(addr), credits: 0, charges: 0 };
  });
  const keyList: KeyM[] = [];
  const holds = new Map<string, HoldM>();
  const leases = new Map<string, LeaseM>();
  const credited = new Map<string, Map<string, { wallet: WalletM; amount: number }>>(); // shard → credit id → credit
  const events = new Map<string, EventM[]>(); // shard → outbox entries in order
  const changes = { settle: 0, release: 0, expire: 0 }; // state-changing resolutions, by kind
  for (const s of names.allShards()) {
    credited.set(s, new Map());
    events.set(s, []);
  }

  const balanceOf = (w: WalletM) => w.credits - w.charges;
  const liveHolds = () => [...holds.values()].filter((h) => h.state === "live");
  const liveLeases = () => [...leases.values()].filter((l) => l.state === "live");
  // Every lock: the live holds' and the live leases'.
  const locks = () => [...liveHolds(), ...liveLeases()];
  const lockedOfWallet = (w: WalletM) =>
    locks()
      .filter((h) => h.key.wallet === w)
      .reduce((s, h) => s + h.amount, 0);
  const lockedOfKey = (k: KeyM) =>
    locks()
      .filter((h) => h.key === k)
      .reduce((s, h) => s + h.amount, 0);
  const activeKeys = () => keyList.filter((k) => !k.revoked);
  const resolution = (h: HoldM | LeaseM, type: "release" | "expire"): EventM => ({
    type,
    hold: h.id,
    wallet: h.key.wallet.addr,
    key: String(h.key.id),
    amount: String(h.amount),
  });

  /** A resolved hold, its state drawn first so that rare states (expired) come up as often as common ones. */
  function pickResolved(): HoldM | null {
    const byState = new Map<HoldState, HoldM[]>();
    for (const h of holds.values()) if (h.state !== "live") byState.set(h.state, [...(byState.get(h.state) ?? []), h]);
    return byState.size === 0 ? null : pick(pick([...byState.values()]));
  }

  /**
   * Reserve, in reserve-batch.lua's order of checks: a revoked key, a hold id already live (held again, nothing
   * more) or resolved (never held again), the key's budget, the wallet's available credit. A fresh hold is taken at once, so the next reserve of a
   * burst sees it as the next item of a batch does.
   */
  function reserve(k: KeyM, holdId: string, amount: number): ExpectedReserve {
    if (k.revoked) return { ok: false, code: "UNAUTHORIZED" };
    const available = balanceOf(k.wallet) - lockedOfWallet(k.wallet);
    const known = holds.get(holdId);
    if (known?.state === "live") return { ok: true, available, fresh: false };
    if (known) return { ok: false, code: "HOLD_RESOLVED" };
    if (k.budget !== null) {
      const left = k.budget - k.spent - lockedOfKey(k);
      if (left < amount) return { ok: false, code: "KEY_BUDGET_EXCEEDED", extra: { key_budget_left_usdc: left, required_usdc: amount } };
    }
    if (available < amount) return { ok: false, code: "INSUFFICIENT_BALANCE", extra: { available_usdc: available, required_usdc: amount } };
    holds.set(holdId, { id: holdId, key: k, amount, state: "live" });
    return { ok: true, available: available - amount, fresh: true };
  }

  /**
   * Settle: a live hold posts its charge; an expired one still records it (the inference happened); a settled or
   * released hold is a no-op. A posted charge moves the wallet and the key's counters and appends its event.
   */
  function settle(h: HoldM, charge: number, usage: SettleUsage): ExpectedSettle {
    const was = h.state;
    const posts = was === "live" || was === "expired";
    if (!posts) return { posts, was };
    h.state = "settled";
    changes.settle++;
    postCharge(h.key, h.id, charge, usage);
    return { posts, was };
  }

  /** A posted charge (of a hold or of a request a lease admitted): the wallet, the key's counters, its event. */
  function postCharge(k: KeyM, id: string, charge: number, usage: SettleUsage): void {
    k.wallet.charges += charge;
    k.spent += charge;
    k.requests += 1;
    k.pt += usage.pt;
    k.ct += usage.ct;
    k.revenue += charge - usage.cost;
    events.get(k.p.shard)!.push({
      type: "charge",
      hold: id,
      wallet: k.wallet.addr,
      key: String(k.id),
      model: MODEL,
      amount: String(charge),
      cost: String(usage.cost),
      pt: String(usage.pt),
      ct: String(usage.ct),
      ...((usage.cr ?? 0) + (usage.cw ?? 0) + (usage.cw1h ?? 0) > 0 && {
        cr: String(usage.cr ?? 0),
        cw: String(usage.cw ?? 0),
        cw1h: String(usage.cw1h ?? 0),
      }),
    });
  }

  /** release-6 'release': a live hold gives its lock back ({1, amount}); any other state answers itself, unchanged. */
  function release(h: HoldM): [1, number] | [0, HoldState] {
    if (h.state !== "live") return [0, h.state];
    h.state = "released";
    changes.release++;
    events.get(h.key.p.shard)!.push(resolution(h, "release"));
    return [1, h.amount];
  }

  /** The sweeper expires a live hold whose time has passed: its lock comes back and a late settle may still post. */
  function expire(h: HoldM): void {
    h.state = "expired";
    h.expiredOnce = true;
    changes.expire++;
    events.get(h.key.p.shard)!.push(resolution(h, "expire"));
  }

  /** credit-3: once per credit id per shard, whatever the amount or wallet a repeat names. */
  function credit(w: WalletM, id: string, amount: number): { applied: boolean; balance: number } {
    const shardCredits = credited.get(w.shard)!;
    if (shardCredits.has(id)) return { applied: false, balance: balanceOf(w) };
    w.credits += amount;
    shardCredits.set(id, { wallet: w, amount });
    return { applied: true, balance: balanceOf(w) };
  }

  /** A revoked key's reserves answer UNAUTHORIZED from then on; its live holds still settle. */
  function revoke(k: KeyM): void {
    k.revoked = true;
  }

  return {
    wallets,
    keyList,
    holds,
    leases,
    credited,
    events,
    changes,
    balanceOf,
    liveHolds,
    liveLeases,
    lockedOfWallet,
    lockedOfKey,
    activeKeys,
    pickResolved,
    resolution,
    reserve,
    settle,
    postCharge,
    release,
    expire,
    credit,
    revoke,
  };
}

/** The model's state, queries and operations. */
export type ReferenceModel = ReturnType<typeof referenceModel>;
