import type { ApiKeyAuth } from "../auth/apiKeys.ts";
import type { SiweVerifier } from "../auth/siwe.ts";
import type { Leases } from "../billing/leases.ts";
import type { Config } from "../config.ts";
import type { Ledger } from "../ledger/ledger.ts";
import type { LedgerScripts } from "../ledger/scripts.ts";
import type { RedisCommands } from "../redis/connect.ts";
import type { Credits } from "../store/credits.ts";
import type { Sql } from "../store/db.ts";
import type { Flusher } from "../store/flusher.ts";
import type { PendingSettles } from "../store/pendingSettles.ts";
import type { PgHealth } from "../store/pgHealth.ts";
import type { ChatService } from "./chat/chat.service.ts";
import type { KeyService } from "./keys/keys.service.ts";
import type { ProviderReachability } from "./models/reachability.ts";
import type { ResponsesService } from "./responses/responses.service.ts";
import type { TopupService } from "./topup/topup.service.ts";
import type { PaidCalls } from "./paycall/paycall.service.ts";
import type { KeylessCalls } from "./paycall/keyless.ts";
import type { UsageService } from "./usage/usage.service.ts";

/**
 * What the routes are given: every service, built once by the composition root (src/wiring.ts, which main,
 * admin and the tests call). Declared here, beside the services it names, so that routes and the composition root
 * both depend downward on it and nothing under modules/ imports from above.
 */
export interface Services {
  config: Config;
  /** ioredis (one Redis or a Cluster): everything off the hot path (keys, SIWE replay guard, rebuild). */
  redis: RedisCommands;
  /** Bun's native client (per master on a cluster): the Lua ledger scripts and the outbox reads. */
  scripts: LedgerScripts;
  /** Postgres, refusing queries at once (503) while `pgHealth` knows it is down. */
  sql: Sql;
  pgHealth: PgHealth;
  ledger: Ledger;
  /** Credit leases, when CREDIT_LEASES=on (billing/leases.ts). */
  leases?: Leases;
  apiKeyAuth: ApiKeyAuth;
  siwe: SiweVerifier;
  credits: Credits;
  keys: KeyService;
  topup: TopupService;
  /** x402 on the model endpoints: the offer on their 402 INSUFFICIENT_BALANCE, the paid retry. */
  paidCalls: PaidCalls;
  /** Model calls without a key: the 402 with x402 terms, paid (exact) or signed in (SIWx) retries. */
  keyless: KeylessCalls;
  usage: UsageService;
  chat: ChatService;
  /** Which keyless providers answer (probed in the background), and GET /v1/models as it shows that. */
  reachability: ProviderReachability;
  /** POST /v1/responses: the Responses API through `chat`, with its conversation store. */
  responses: ResponsesService;
  /** Charges whose settle could not reach Redis, posted by the repair job. */
  pendingSettles: PendingSettles;
  flusher: Flusher;
  /** Starts the flusher, the hold sweeper and the providers' reachability probe. */
  startBackground(): void;
  /** Runs every repair job once, now (tests call it instead of waiting for the 30 s timer). */
  repairNow(): Promise<void>;
  /** Stops background work, drains the outbox, closes connections. */
  close(): Promise<void>;
}
