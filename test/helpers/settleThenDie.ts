/**
 * A process that settles one hold and kills itself with SIGKILL the moment the ledger says the settle is on the
 * wire (the `sent` callback that lets an answer leave): what Redis holds afterwards is what a client who got that
 * answer would be charged. argv: Redis socket path, wallet, hold id, amount held, charge.
 */
import { Redis } from "ioredis";
import { Ledger } from "../../src/ledger/ledger.ts";
import { RedisNames } from "../../src/ledger/names.ts";
import { LedgerScripts } from "../../src/ledger/scripts.ts";

const [socket, wallet, holdId, held, charge] = process.argv.slice(2) as [string, string, string, string, string];
const names = new RedisNames(48);
const redis = new Redis(socket);
const scripts = await LedgerScripts.connect(socket);
const ledger = new Ledger(redis, scripts, names, { rateLimitRequests: 1_000, rateLimitWindowMs: 60_000, holdTtlMs: 60_000 });
await ledger.fence.readAll();
const p = ledger.principal(1, wallet);
const reserved = await ledger.reserve(p, holdId, Number(held));
if (!reserved.ok) throw new Error(`reserve refused: ${JSON.stringify(reserved)}`);
const details = { promptTokens: 10, completionTokens: 5, costMicro: 40, model: "m/x" };
void ledger.settleOutcome(p, holdId, Number(charge), details, () => process.kill(process.pid, "SIGKILL"));
