import { RedisClient } from "bun";
import audit from "../../lua/audit-3.lua" with { type: "text" };
import credit from "../../lua/credit-2.lua" with { type: "text" };
import release from "../../lua/release-5.lua" with { type: "text" };
import reserve from "../../lua/reserve-6.lua" with { type: "text" };
import settle from "../../lua/settle-5.lua" with { type: "text" };

// Imported as text so a compiled binary carries them; the key count comes from the `name-<numKeys>.lua` name.
const SOURCES = { "reserve-6.lua": reserve, "settle-5.lua": settle, "release-5.lua": release, "credit-2.lua": credit, "audit-3.lua": audit } as const;

/** The ledger's Lua scripts by file name. */
export const SCRIPT_FILES = Object.keys(SOURCES) as (keyof typeof SOURCES)[];

/** Source of a script as shipped (tests pin its SHA1). */
export function scriptSource(file: keyof typeof SOURCES): string {
  return SOURCES[file];
}

type Arg = string | number;

interface Script {
  sha: string;
  source: string;
  numKeys: number;
}

function script(file: keyof typeof SOURCES): Script {
  const source = scriptSource(file);
  return {
    sha: new Bun.CryptoHasher("sha1").update(source).digest("hex"),
    source,
    numKeys: Number(/-(\d+)\.lua$/.exec(file)![1]),
  };
}

/** A Redis URL or a unix socket path, as Bun's client wants it. */
export function bunRedisUrl(target: string): string {
  return target.startsWith("/") ? `redis+unix://${target}` : target;
}

/**
 * Runs the ledger scripts on Bun's native Redis client. The chat path makes two script calls per request, and
 * under Bun ioredis spends most of the gateway's CPU in node:net writes and its JS reply decoder; the native
 * client halves the cost of each call (bench/README.md). EVALSHA first, EVAL on NOSCRIPT, so a restarted or
 * flushed Redis needs no reload step.
 */
export class LedgerScripts {
  private readonly scripts = {
    reserve: script("reserve-6.lua"),
    settle: script("settle-5.lua"),
    release: script("release-5.lua"),
    credit: script("credit-2.lua"),
    audit: script("audit-3.lua"),
  };

  constructor(readonly client: RedisClient) {
    // A restarted Redis has lost its script cache: load again on every (re)connect, so the EVALSHA fallback
    // stays rare. (The fallback re-sends as EVAL after the NOSCRIPT reply, behind commands queued meanwhile.)
    client.onconnect = () => void this.load().catch(() => {});
  }

  /** Connects to a Redis URL or unix socket path; reconnects by itself after Redis restarts. */
  static async connect(target: string): Promise<LedgerScripts> {
    const scripts = new LedgerScripts(new RedisClient(bunRedisUrl(target), { autoReconnect: true, maxRetries: 1_000_000, enableOfflineQueue: true }));
    await scripts.load();
    return scripts;
  }

  /** SCRIPT LOAD of every script, so the first EVALSHA finds it. */
  async load(): Promise<void> {
    await Promise.all(Object.values(this.scripts).map((s) => this.client.send("SCRIPT", ["LOAD", s.source])));
  }

  /** reserve-6.lua: {1, available, rate_remaining} | {0, reason, detail?}. */
  reserve(...keysThenArgs: Arg[]): Promise<[number, number | string, number?]> {
    return this.run(this.scripts.reserve, keysThenArgs) as Promise<[number, number | string, number?]>;
  }

  /** settle-5.lua: {1, balance_after} | {0, state}. */
  settle(...keysThenArgs: Arg[]): Promise<[number, number | string]> {
    return this.run(this.scripts.settle, keysThenArgs) as Promise<[number, number | string]>;
  }

  /** release-5.lua: {1, amount_released} | {0, state}. */
  release(...keysThenArgs: Arg[]): Promise<[number, number | string]> {
    return this.run(this.scripts.release, keysThenArgs) as Promise<[number, number | string]>;
  }

  /** credit-2.lua: {1 | 0, balance}. */
  credit(...keysThenArgs: Arg[]): Promise<[number, number]> {
    return this.run(this.scripts.credit, keysThenArgs) as Promise<[number, number]>;
  }

  /** audit-3.lua (read only): one shard's books as of one instant, for `admin audit`; its key count varies. */
  audit(keys: string[], argv: Arg[]): Promise<unknown[]> {
    return this.run({ ...this.scripts.audit, numKeys: keys.length }, [...keys, ...argv]) as Promise<unknown[]>;
  }

  close(): void {
    this.client.close();
  }

  private async run(s: Script, keysThenArgs: Arg[]): Promise<unknown> {
    const args = [s.sha, String(s.numKeys)];
    for (const a of keysThenArgs) args.push(typeof a === "string" ? a : String(a));
    try {
      return await this.client.send("EVALSHA", args);
    } catch (e) {
      if (!(e instanceof Error) || !e.message.startsWith("NOSCRIPT")) throw e;
      args[0] = s.source;
      return this.client.send("EVAL", args);
    }
  }
}
