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
}

/** What reserve must answer, in the model's terms. */
export type ExpectedReserve =
  | { ok: true; available: number; fresh: boolean }
  | { ok: false; code: "UNAUTHORIZED" | "KEY_BUDGET_EXCEEDED" | "INSUFFICIENT_BALANCE"; extra?: Record<string, number> };

/** A fresh model: wallets whose last 4 hex digits pick their shards (two share shard 1, so they share holds/outbox/credited). */
export function referenceModel(names: RedisNames, pick: <T>(xs: readonly T[]) => T) {
  const wallets: WalletM[] = ["0000", "0001", "0005", "0002", "0007"].map((tail, i) => {
    const addr = `0x${String(i + 1).padStart(36, "a")}${tail}`;
    return { addr, shard: names.shardOf(addr), credits: 0, charges: 0 };
  });
  const keyList: KeyM[] = [];
  const holds = new Map<string, HoldM>();
  const credited = new Map<string, Map<string, { wallet: WalletM; amount: number }>>(); // shard → credit id → credit
  const events = new Map<string, EventM[]>(); // shard → outbox entries in order
  const changes = { settle: 0, release: 0, expire: 0 }; // state-changing resolutions, by kind
  for (const s of names.allShards()) {
    credited.set(s, new Map());
    events.set(s, []);
  }

  const balanceOf = (w: WalletM) => w.credits - w.charges;
  const liveHolds = () => [...holds.values()].filter((h) => h.state === "live");
  const lockedOfWallet = (w: WalletM) => liveHolds().filter((h) => h.key.wallet === w).reduce((s, h) => s + h.amount, 0);
  const lockedOfKey = (k: KeyM) => liveHolds().filter((h) => h.key === k).reduce((s, h) => s + h.amount, 0);
  const activeKeys = () => keyList.filter((k) => !k.revoked);

  /** A resolved hold, its state drawn first so that rare states (expired) come up as often as common ones. */
  function pickResolved(): HoldM | null {
    const byState = new Map<HoldState, HoldM[]>();
    for (const h of holds.values()) if (h.state !== "live") byState.set(h.state, [...(byState.get(h.state) ?? []), h]);
    return byState.size === 0 ? null : pick(pick([...byState.values()]));
  }

  /** What the model says reserve must do, given the checks' order in reserve-batch.lua. */
  function expectedReserve(k: KeyM, holdId: string, amount: number): ExpectedReserve {
    if (k.revoked) return { ok: false, code: "UNAUTHORIZED" };
    const available = balanceOf(k.wallet) - lockedOfWallet(k.wallet);
    if (holds.get(holdId)?.state === "live") return { ok: true, available, fresh: false };
    if (k.budget !== null) {
      const left = k.budget - k.spent - lockedOfKey(k);
      if (left < amount) return { ok: false, code: "KEY_BUDGET_EXCEEDED", extra: { key_budget_left_usdc: left, required_usdc: amount } };
    }
    if (available < amount) return { ok: false, code: "INSUFFICIENT_BALANCE", extra: { available_usdc: available, required_usdc: amount } };
    return { ok: true, available: available - amount, fresh: true };
  }

  return { wallets, keyList, holds, credited, events, changes, balanceOf, liveHolds, lockedOfWallet, lockedOfKey, activeKeys, pickResolved, expectedReserve };
}

/** The model's state and queries. */
export type ReferenceModel = ReturnType<typeof referenceModel>;
