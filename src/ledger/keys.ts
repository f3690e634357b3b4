/**
 * Every Redis key name of the ledger, in one place. A wallet's keys all carry its shard's hash tag, so each
 * Lua script touches one slot: the same code runs on one Redis or a Redis Cluster (design §3).
 */
export class LedgerKeys {
  constructor(readonly shards: number) {}

  /** Shard of a (lower-case hex) wallet: its last 4 hex digits modulo the shard count — cheap and even. */
  shardOf(wallet: string): string {
    const n = Number.parseInt(wallet.slice(-4), 16) % this.shards;
    return `{s${n < 10 ? "0" : ""}${n}}`;
  }

  allShards(): string[] {
    return Array.from({ length: this.shards }, (_, n) => `{s${n < 10 ? "0" : ""}${n}}`);
  }

  wallet(shard: string, wallet: string) {
    return `gw:${shard}:w:${wallet}`;
  }
  apiKey(shard: string, keyId: number | string) {
    return `gw:${shard}:k:${keyId}`;
  }
  holds(shard: string) {
    return `gw:${shard}:holds`;
  }
  /** One hold's whole state: "live|amount|wallet|keyId" while held, then settled | released | expired. */
  holdMarker(shard: string, holdId: string) {
    return `gw:${shard}:hd:${holdId}`;
  }
  rate(shard: string, wallet: string, window: number) {
    return `gw:${shard}:rl:${wallet}:${window}`;
  }
  outbox(shard: string) {
    return `gw:${shard}:outbox`;
  }
  credited(shard: string) {
    return `gw:${shard}:credited`;
  }
  /**
   * The shard's ledger fence: the ledger epoch while balance changes may run, "R:<epoch>" while a rebuild runs.
   * Every balance-changing script checks it against the epoch its caller believes in (one slot per script).
   */
  fence(shard: string) {
    return `gw:${shard}:fence`;
  }
  /** API key hash → "keyId|wallet"; immutable, so it is safe to cache in process forever. */
  keyHash(sha256: string) {
    return `gw:kh:${sha256}`;
  }
  siweSeen(sha256: string) {
    return `gw:siwe:${sha256}`;
  }
  /** Set once the ledger has been built (or rebuilt from Postgres); absent means Redis came up empty. */
  readonly ready = "gw:ledger:ready";
  /** Counter of ledger epochs: each rebuild takes the next one. */
  readonly epoch = "gw:ledger:epoch";
  /** LEDGER_SHARDS the ledger was built with: another value would move every wallet to another shard. */
  readonly shardCount = "gw:ledger:shards";
  /** The rebuild lock: its owner's token, with a lifetime the owner renews while it works. */
  readonly rebuildLock = "gw:ledger:rebuilding";
}
