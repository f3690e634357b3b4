import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Redis } from "ioredis";
import { keyStateFields } from "../src/ledger/apiKeyState.ts";
import { RedisNames } from "../src/ledger/names.ts";
import { LedgerScripts, SCRIPT_FILES, scriptFile, scriptSource } from "../src/ledger/scripts.ts";
import { reserveArgs, settleArgs } from "../src/ledger/batchArgs.ts";
import { privateRedis } from "./helpers/services.ts";

/**
 * The SHA1 of every ledger script as shipped. Redis runs them by this SHA1 (EVALSHA), and every balance in the
 * system depends on their exact text: changing a script must be a deliberate act that updates this table.
 * The SHA1 is of the script as Redis runs it, its includes in place; recompute with
 * `bun -e 'import { SCRIPT_FILES, scriptSource } from "./src/ledger/scripts.ts"; for (const f of SCRIPT_FILES) console.log(f, new Bun.CryptoHasher("sha1").update(scriptSource(f)).digest("hex"))'`.
 */
const PINNED_SHA1: Record<(typeof SCRIPT_FILES)[number], string> = {
  "reserve-batch.lua": "e0f9a032441f3014b1b6e14b10222ea2c7c65368",
  "settle-batch.lua": "b10761e4fb71dcc768257897ee72a09562cfde74",
  "settle-leased-batch.lua": "03904a898a401c41eb8f2f7c0be1863adb5302bb",
  "lease-8.lua": "83b2e9e04451b72284b29d0b08ec31dfd50a5b98",
  "release-6.lua": "5ea5969a4a04b3036068e18021b3d610abe6234c",
  "credit-3.lua": "d53cc4860b8ac1dd1ed1bbc2646a846ba6356007",
  "credit-settle-3.lua": "c11b6bbdefebca931ece28785967efcbf177e62e",
  "compare-and-set-1.lua": "c039c19a10d9e9734068d7e69b3398b7e4327c3a",
  "count-request-3.lua": "42a70b1efa09408290dbedc1f54d40f2a849ef25",
  "audit-3.lua": "acc74f9a9f7f2d752ff76f75dc7ead050cabf4e4",
  "rebuild-write-2.lua": "520ce1dbaf4f0321b2996dd7dae0dd9100d3d330",
  "store-response-3.lua": "5cd89477609a7b3ea839fc1a66dba2352124d3d0",
};

const LUA_DIR = join(import.meta.dir, "..", "lua");

const sha1 = (text: string) => new Bun.CryptoHasher("sha1").update(text).digest("hex");

/** Splits a script into its opening `--[[ ... ]]` comment and the code after it. */
function split(source: string): { header: string; code: string } {
  const m = /^--\[\[([\s\S]*?)\]\]\n/.exec(source);
  if (!m) throw new Error("script does not open with a --[[ ... ]] comment block");
  return { header: m[1]!, code: source.slice(m[0].length) };
}

const indices = (text: string, name: "KEYS" | "ARGV") =>
  [...text.matchAll(new RegExp(`${name}\\[(\\d+)\\]`, "g"))].map((m) => Number(m[1]));

describe("ledger Lua scripts", () => {
  test("the shipped set is exactly the lua/ folder, byte for byte", () => {
    const onDisk = readdirSync(LUA_DIR)
      .filter((f) => f.endsWith(".lua"))
      .sort();
    expect([...SCRIPT_FILES].sort() as string[]).toEqual(onDisk);
    for (const file of SCRIPT_FILES) expect(scriptFile(file)).toBe(readFileSync(join(LUA_DIR, file), "utf8"));
  });

  test("every include of lua/includes/ is used, and pulled in whole where a script names it", () => {
    const includes = readdirSync(join(LUA_DIR, "includes")).filter((f) => f.endsWith(".lua"));
    expect(includes.length).toBeGreaterThan(0);
    for (const inc of includes) {
      const name = `includes/${inc.replace(/\.lua$/, "")}`;
      const users = SCRIPT_FILES.filter((f) => scriptFile(f).includes(`--- @include "${name}"\n`));
      expect(users.length).toBeGreaterThan(0);
      for (const f of users) expect(scriptSource(f)).toContain(readFileSync(join(LUA_DIR, "includes", inc), "utf8"));
    }
    for (const f of SCRIPT_FILES) expect(scriptSource(f)).not.toContain("@include");
  });

  test("every script that checks the shard fence does it through the include, with the epoch in ARGV[1] (per shard in a batch spanning shards)", () => {
    const fenced = SCRIPT_FILES.filter((f) => /shard fence/.test(split(scriptFile(f)).header));
    expect(fenced.sort()).toEqual([
      "credit-3.lua",
      "credit-settle-3.lua",
      "lease-8.lua",
      "rebuild-write-2.lua",
      "release-6.lua",
      "reserve-batch.lua",
      "settle-batch.lua",
      "settle-leased-batch.lua",
    ]);
    for (const f of fenced) {
      const { header, code } = split(scriptFile(f));
      expect(code).toContain('--- @include "includes/fence"');
      expect(code).not.toMatch(/'FENCED'/);
      // A batch that may span shards takes an epoch per shard (ARGV[s+1]); every other script, ARGV[1].
      expect(header).toMatch(/ARGV\[(1|s\+1)\] (ledger epoch the caller believes in|the closed fence this rebuild set)/);
    }
  });

  test("every script's SHA1 is pinned", () => {
    const actual = Object.fromEntries(SCRIPT_FILES.map((f) => [f, sha1(scriptSource(f))]));
    expect(actual).toEqual(PINNED_SHA1);
  });

  for (const file of SCRIPT_FILES) {
    describe(file, () => {
      const source = scriptSource(file);
      // A variadic script says so in its name (`name-batch.lua`): its common keys are the documented KEYS[n]; one
      // whose call may span shards has none, only keys per shard (KEYS[s+n]) and per item (KEYS[b+n]).
      const variadic = file.endsWith("-batch.lua");
      const perShard = variadic && /per shard of the batch/.test(split(source).header);
      const declaredKeys = perShard
        ? 0
        : variadic
          ? Math.max(...indices(split(source).code, "KEYS"))
          : Number(/-(\d+)\.lua$/.exec(file)![1]);

      test("opens with a comment block documenting KEYS, ARGV and Returns", () => {
        expect(source.startsWith("--[[\n")).toBe(true);
        const { header } = split(source);
        expect(header).toContain(perShard ? "KEYS[s+1]" : "KEYS[1]");
        expect(header).toContain("ARGV[1]");
        expect(header).toContain("Returns");
        if (variadic) expect(header).toContain("variadic");
      });

      test("the key count in the file name is the highest KEYS[n] the code uses, and every key is documented", () => {
        const { header, code } = split(source);
        const used = indices(code, "KEYS");
        if (perShard) {
          // Keys only by shard and by item, every one of them documented.
          expect(used).toEqual([]);
          const offsets = (text: string) => [...text.matchAll(/KEYS\[([sb]) ?\+ ?(\d+)\]/g)].map((m) => `${m[1]}+${m[2]}`);
          const documented = new Set(offsets(header));
          expect([...new Set(offsets(code))].filter((o) => !documented.has(o))).toEqual([]);
          return;
        }
        expect(used.length).toBeGreaterThan(0);
        expect(Math.max(...used)).toBe(declaredKeys);
        // Every key 1..n is used by the code and described in the header.
        const usedSet = new Set(used);
        const documented = new Set(indices(header, "KEYS"));
        for (let n = 1; n <= declaredKeys; n++) {
          expect(usedSet.has(n)).toBe(true);
          expect(documented.has(n)).toBe(true);
        }
        expect(Math.max(...documented)).toBe(declaredKeys);
      });

      test("every ARGV the code reads is documented in the header", () => {
        const { header, code } = split(source);
        const documented = new Set(indices(header, "ARGV"));
        const used = [...new Set(indices(code, "ARGV"))].sort((a, b) => a - b);
        expect(used.length).toBeGreaterThan(0);
        expect(used.filter((n) => !documented.has(n))).toEqual([]);
      });
    });
  }
});

/**
 * What reserve-batch and settle-batch do, called directly on a private redis-server: every case of the former
 * one-call scripts (the reserve and settle that came before the batches) through a batch, and what only a batch can do (ok and refused items
 * mixed, one hold id twice, each item seeing the ones before it).
 */
describe("batch scripts on Redis", () => {
  const names = new RedisNames(4);
  const wallet = `0x${"ab".repeat(19)}0001`;
  const shard = names.shardOf(wallet);
  const W = names.wallet(shard, wallet);
  const K1 = names.apiKey(shard, 1); // no budget
  const K2 = names.apiKey(shard, 2); // budget 1_000
  const K3 = names.apiKey(shard, 3); // revoked
  const K4 = names.apiKey(shard, 4); // 3 requests per minute of its own
  const keyOf: Record<number, string> = { 1: K1, 2: K2, 3: K3, 4: K4 };
  const rpmOf: Record<number, number> = { 4: 3 };
  const WINDOW = 7; // window number of the rate counters; elapsed 15_000 of a 60_000 ms window
  const MINUTE = 1_000; // the keys' minute window number; elapsed 15_000 of it
  const marker = (id: string) => names.holdMarker(shard, id);
  let server: Awaited<ReturnType<typeof privateRedis>>;
  let redis: Redis;
  let scripts: LedgerScripts;

  beforeAll(async () => {
    server = await privateRedis();
    redis = new Redis(server.socket);
    scripts = await LedgerScripts.connect(server.socket);
  });
  afterAll(async () => {
    redis?.disconnect();
    scripts?.close();
    await server?.stop();
  });
  beforeEach(async () => {
    await redis.flushall();
    await redis.set(names.fence(shard), "1");
    await redis.hset(W, { balance: 10_000, locked: 0 });
    await redis.hset(K1, keyStateFields({ revoked: false, budget: null }));
    await redis.hset(K2, keyStateFields({ revoked: false, budget: 1_000 }));
    await redis.hset(K3, keyStateFields({ revoked: true, budget: null }));
    await redis.hset(K4, keyStateFields({ revoked: false, budget: null }));
  });

  type R = [key: number, holdId: string, amount: number | string];
  function reserve(
    items: R[],
    o: { epoch?: string; limit?: number; window?: number; extraKey?: boolean; minute?: number; inMinute?: number | string } = {},
  ) {
    const list = items.map(([k, holdId, amount]) => ({
      shard,
      walletName: W,
      apiKeyName: keyOf[k]!,
      wallet,
      keyId: k,
      holdId,
      amount: amount as number,
      rpm: rpmOf[k] ?? 0,
    }));
    const limits = { rateLimitRequests: o.limit ?? 100, rateLimitWindowMs: 60_000, holdTtlMs: 3_600_000 };
    // Rate window WINDOW, 15 s into it; the keys' minute and the time into it as the test says.
    const { keys, argv } = reserveArgs(
      names,
      list.length ? new Map([[shard, list]]) : new Map(),
      [o.epoch ?? "1"],
      limits,
      WINDOW * 60_000 + 15_000,
    );
    argv[1] = String(o.window ?? 60_000);
    argv[4] = String(o.minute ?? MINUTE);
    argv[5] = String(o.inMinute ?? 15_000);
    for (const [i, [, , amount]] of items.entries()) argv[argv.length - 2 * items.length + 2 * i + 1] = String(amount);
    if (o.extraKey) keys.push(W);
    return scripts.reserveBatch(keys, argv);
  }
  type S = [key: number, holdId: string, charge: number | string, cost?: number | string, cache?: [number, number, number]];
  async function settle(items: S[], epoch = "1") {
    const list = items.map(([k, holdId, charge, cost = 10, cache = [0, 0, 0]]) => ({
      shard,
      walletName: W,
      apiKeyName: keyOf[k]!,
      wallet,
      keyId: k,
      holdId,
      charge: Number(charge),
      promptTokens: 100,
      completionTokens: 20,
      costMicro: Number(cost),
      model: "m/x",
      cachedPromptTokens: cache[0],
      cacheWriteTokens: cache[1],
      cacheWrite1hTokens: cache[2],
    }));
    const { keys, argv } = settleArgs(names, list.length ? new Map([[shard, list]]) : new Map(), [epoch], 604_800);
    return scripts.settleBatch(keys, argv);
  }
  async function state() {
    const [w, k1, k2, holds, outbox, rate] = await Promise.all([
      redis.hgetall(W),
      redis.hgetall(K1),
      redis.hgetall(K2),
      redis.zrange(names.holds(shard), "0", "-1"),
      redis.xrange(names.outbox(shard), "-", "+"),
      redis.get(names.rate(shard, wallet, WINDOW)),
    ]);
    return {
      w,
      k1,
      k2,
      holds: holds.sort(),
      outbox: outbox.flatMap(([, f]) => JSON.parse(`[${f[1]!}]`) as Record<string, unknown>[]),
      entries: outbox.length,
      rate,
    };
  }

  test("reserve: ok and refused items in one batch, each seeing the ones before it; a repeated hold id holds once", async () => {
    const r = await reserve([
      [1, "a", 6_000], // held: 4_000 left
      [3, "b", 1], // revoked key: not counted by the rate limit
      [1, "c", 5_000], // 4_000 available after a
      [2, "d", 900], // budget 1_000: held
      [2, "e", 200], // budget left 100 after d
      [1, "a", 6_000], // a again: already held, nothing more
    ]);
    expect(r).toEqual([
      1,
      [1, 4_000, 99],
      [0, "UNAUTHORIZED"],
      [0, "INSUFFICIENT_BALANCE", 4_000],
      [1, 3_100, 97],
      [0, "KEY_BUDGET_EXCEEDED", 100],
      [1, 3_100, 0],
    ]);
    const s = await state();
    expect(s.w).toEqual({ balance: "10000", locked: "6900" });
    expect(s.k1.locked).toBe("6000");
    expect(s.k2.locked).toBe("900");
    expect(s.holds).toEqual(["a", "d"]);
    expect(await redis.get(marker("a"))).toBe(`live|6000|${wallet}|1`);
    expect(await redis.get(marker("c"))).toBeNull();
    expect(s.rate).toBe("4"); // a, c, d, e passed the rate limit (c and e refused later still count)
    expect(await redis.pttl(names.rate(shard, wallet, WINDOW))).toBeGreaterThan(110_000);
    // A second batch sees the first: the counter goes on, and a resolved hold id is refused.
    await redis.set(marker("z"), "settled");
    expect(
      await reserve([
        [1, "z", 1],
        [1, "f", 4_000],
      ]),
    ).toEqual([1, [0, "HOLD_RESOLVED"], [0, "INSUFFICIENT_BALANCE", 3_100]]);
    expect(await redis.get(names.rate(shard, wallet, WINDOW))).toBe("5");
  });

  test("reserve: the rate limit refuses mid-batch, weighing the previous window", async () => {
    await redis.set(names.rate(shard, wallet, WINDOW - 1), "4"); // 4 × 45/60 = 3 weighted
    const r = await reserve(
      [
        [1, "a", 1],
        [1, "b", 1],
        [1, "c", 1],
      ],
      { limit: 5 },
    );
    expect(r).toEqual([1, [1, 9_999, 1], [1, 9_998, 0], [0, "RATE_LIMITED", 45_000]]);
    expect((await state()).rate).toBe("2");
  });

  test("reserve: a key's own requests per minute refuse past it, weighing its previous minute, apart from the wallet's", async () => {
    // Key 4 allows 3 a minute: its minute before had 2 (× 45/60 = 1 weighted), so 2 more pass this minute.
    await redis.hset(K4, { rw: MINUTE - 1, rc: 2, rp: 0 });
    const r = await reserve([
      [4, "a", 1],
      [1, "b", 1], // another key of the wallet: only the wallet's limit applies
      [4, "c", 1],
      [4, "d", 1], // the key's minute is full: refused, retry when it ends (45 s)
      [1, "e", 1],
    ]);
    expect(r).toEqual([1, [1, 9_999, 1], [1, 9_998, 98], [1, 9_997, 0], [0, "RATE_LIMITED", 45_000, "key"], [1, 9_996, 96]]);
    expect(await redis.hmget(K4, "rw", "rc", "rp")).toEqual([String(MINUTE), "2", "2"]);
    // The refused request took no slot of the wallet's window: a, b, c, e did.
    expect((await state()).rate).toBe("4");
    // The next minute weighs this one (2 × 30/60 = 1); a request refused for credit does not use up the key's minute.
    expect(await reserve([[4, "g", 1]], { minute: MINUTE + 1, inMinute: 30_000 })).toEqual([1, [1, 9_995, 1]]);
    expect(await redis.hmget(K4, "rw", "rc", "rp")).toEqual([String(MINUTE + 1), "1", "2"]);
    expect(await reserve([[4, "f", 1_000_000]], { minute: MINUTE + 1, inMinute: 30_000 })).toEqual([1, [0, "INSUFFICIENT_BALANCE", 9_995]]);
    expect(await redis.hget(K4, "rc")).toBe("1");
    // Two minutes on, nothing of it is left.
    expect(await reserve([[4, "h", 1]], { minute: MINUTE + 3 })).toEqual([1, [1, 9_994, 2]]);
    expect(await redis.hmget(K4, "rw", "rc", "rp")).toEqual([String(MINUTE + 3), "1", "0"]);
  });

  test("reserve: a full wallet window refuses as the wallet's, before the key's minute is looked at", async () => {
    await redis.hset(K4, { rw: MINUTE, rc: 3, rp: 0 });
    expect(await reserve([[4, "a", 1]], { limit: 0 })).toEqual([1, [0, "RATE_LIMITED", 45_000]]);
  });

  test("reserve: a fenced batch or bad arguments change nothing", async () => {
    const before = await state();
    expect(
      await reserve(
        [
          [1, "a", 1],
          [1, "b", 2],
        ],
        { epoch: "0" },
      ),
    ).toEqual([0, "FENCED", "1", 1]);
    await redis.set(names.fence(shard), "R:2");
    expect(await reserve([[1, "a", 1]], { epoch: "1" })).toEqual([0, "FENCED", "R:2", 1]);
    await redis.set(names.fence(shard), "1");
    for (const bad of [
      () =>
        reserve([
          [1, "a", 1],
          [1, "", 1],
        ]),
      () =>
        reserve([
          [1, "a", 1],
          [1, "b", "1.5"],
        ]),
      () => reserve([[1, "a", 1]], { window: 0 }),
      () => reserve([[1, "a", 1]], { inMinute: 60_000 }),
      () => reserve([[1, "a", 1]], { inMinute: "1.5" }),
      () => reserve([[1, "a", 1]], { extraKey: true }),
      () => reserve([]),
    ]) {
      await expect(bad()).rejects.toThrow("reserve-batch: bad arguments");
    }
    expect(await state()).toEqual(before);
    expect(await redis.exists(marker("a"))).toBe(0);
  });

  test("settle: posted, repeated, unknown, released and expired holds in one batch", async () => {
    expect(
      await reserve([
        [1, "a", 3_000],
        [2, "b", 500],
        [1, "c", 100],
        [1, "d", 200],
      ]),
    ).toEqual([1, [1, 7_000, 99], [1, 6_500, 98], [1, 6_400, 97], [1, 6_200, 96]]);
    await redis.set(marker("c"), "released"); // as release-6 leaves them (locks given back by hand here)
    await redis.set(marker("d"), "expired");
    await redis.zrem(names.holds(shard), "c", "d");
    await redis.hset(W, "locked", 3_500);
    await redis.hset(K1, "locked", 3_000);
    const r = await settle([
      [1, "a", 2_500],
      [2, "b", 700, 800],
      [1, "a", 1],
      [1, "x", 5],
      [1, "c", 5],
      [1, "d", 40],
    ]);
    expect(r).toEqual([1, [1], [1], [0, "settled"], [0, "UNKNOWN_HOLD"], [0, "released"], [1]]);
    const s = await state();
    expect(s.w).toEqual({ balance: "6760", locked: "0" });
    expect(s.k1).toMatchObject({
      locked: "0",
      spent: "2540",
      requests: "2",
      prompt_tokens: "200",
      completion_tokens: "40",
      revenue: "2520",
    });
    expect(s.k2).toMatchObject({ locked: "0", spent: "700", requests: "1", revenue: "-100" });
    expect(s.holds).toEqual([]);
    for (const id of ["a", "b", "d"]) expect(await redis.get(marker(id))).toBe("settled");
    expect(await redis.ttl(marker("a"))).toBeGreaterThan(600_000);
    expect(s.outbox.map(({ at, ...e }: Record<string, unknown>) => (expect(Number(at)).toBeGreaterThan(1.6e12), e))).toEqual([
      { type: "charge", hold: "a", wallet, key: 1, model: "m/x", amount: 2_500, cost: 10, pt: 100, ct: 20 },
      { type: "charge", hold: "b", wallet, key: 2, model: "m/x", amount: 700, cost: 800, pt: 100, ct: 20 },
      { type: "charge", hold: "d", wallet, key: 1, model: "m/x", amount: 40, cost: 10, pt: 100, ct: 20 },
    ]);
    // One outbox entry for the batch's three charges.
    expect(s.entries).toBe(1);
  });

  test("settle: a charge's cache split goes to its event and to the key's cache counters", async () => {
    await reserve([
      [1, "a", 3_000],
      [1, "b", 500],
    ]);
    // a: 30 of its 100 prompt tokens read from the cache, 40 written for 5 minutes, 20 for an hour; b: none.
    expect(
      await settle([
        [1, "a", 2_500, 10, [30, 40, 20]],
        [1, "b", 400],
      ]),
    ).toEqual([2]);
    const s = await state();
    expect(s.k1).toMatchObject({ prompt_tokens: "200", cached_prompt_tokens: "30", cache_write_tokens: "60", spent: "2900" });
    expect(s.outbox.map(({ at, ...e }: Record<string, unknown>) => e)).toEqual([
      { type: "charge", hold: "a", wallet, key: 1, model: "m/x", amount: 2_500, cost: 10, pt: 100, ct: 20, cr: 30, cw: 40, cw1h: 20 },
      { type: "charge", hold: "b", wallet, key: 1, model: "m/x", amount: 400, cost: 10, pt: 100, ct: 20 },
    ]);
    await expect(settle([[1, "c", 1, 10, [1, -1, 0]]])).rejects.toThrow("settle-batch: bad arguments");
  });

  test("settle: a batch of live holds applies the gateway's sums, the same as its items one by one", async () => {
    const holds: R[] = [
      [1, "a", 3_000],
      [2, "b", 500],
      [1, "c", 200],
    ];
    const charges: S[] = [
      [1, "a", 2_500, 10, [30, 40, 20]],
      [2, "b", 700, 800],
      [1, "c", 150, 90],
    ];
    await reserve(holds);
    expect(await settle(charges)).toEqual([2]);
    const batched = await state();
    await redis.flushall();
    await redis.set(names.fence(shard), "1");
    await redis.hset(W, { balance: 10_000, locked: 0 });
    await redis.hset(K1, keyStateFields({ revoked: false, budget: null }));
    await redis.hset(K2, keyStateFields({ revoked: false, budget: 1_000 }));
    await reserve(holds);
    for (const c of charges) expect(await settle([c])).toEqual([2]);
    const single = await state();
    const strip = (s: typeof batched) => ({ ...s, entries: 0, outbox: s.outbox.map(({ at, ...e }) => e) });
    expect(strip(batched)).toEqual(strip(single));
    expect(batched.w).toEqual({ balance: "6650", locked: "0" });
    expect(batched.k1).toMatchObject({ locked: "0", spent: "2650", requests: "2", revenue: "2550", cache_write_tokens: "60" });
    expect(batched.k2).toMatchObject({ locked: "0", spent: "700", requests: "1", revenue: "-100" });
    expect(batched.entries).toBe(1);
  });

  test("settle: the script refuses arguments of the wrong shape (the numbers are settleArgs' to check)", async () => {
    await reserve([[1, "a", 3_000]]);
    const before = await state();
    const good = settleArgs(
      names,
      new Map([
        [
          shard,
          [
            {
              shard,
              walletName: W,
              apiKeyName: K1,
              wallet,
              keyId: 1,
              holdId: "a",
              charge: 1,
              promptTokens: 1,
              completionTokens: 1,
              costMicro: 1,
              model: "m",
            },
          ],
        ],
      ]),
      ["1"],
      60,
    );
    const at = (i: number, v: string) => good.argv.map((a, j) => (j === i ? v : a));
    for (const argv of [
      at(4, "21"), // the item's wallet 2 of 1
      at(4, "1"), // one byte for one item
      at(good.argv.length - 1, '{"type":"release"'), // not a charge event
      at(good.argv.length - 2, ""), // no hold id
      at(7, "-1"), // the wallet's charges
      at(12, "1.5"), // the key's revenue
      good.argv.slice(0, -1),
    ]) {
      await expect(scripts.settleBatch(good.keys, argv)).rejects.toThrow("settle-batch: bad arguments");
    }
    expect(await state()).toEqual(before);
    expect(await scripts.settleBatch(good.keys, good.argv)).toEqual([2]);
  });

  test("settle: a fenced batch or bad arguments change nothing", async () => {
    await reserve([[1, "a", 3_000]]);
    const before = await state();
    expect(await settle([[1, "a", 1]], "2")).toEqual([0, "FENCED", "1", 1]);
    for (const bad of [
      () =>
        settle([
          [1, "a", 1],
          [1, "", 1],
        ]),
      () =>
        settle([
          [1, "a", 1],
          [1, "b", -1],
        ]),
      () =>
        settle([
          [1, "a", 1],
          [1, "b", 1, "1.5"],
        ]),
      () => settle([]),
    ]) {
      await expect(bad()).rejects.toThrow("settle-batch: bad arguments");
    }
    expect(await state()).toEqual(before);
    expect(await redis.get(marker("a"))).toBe(`live|3000|${wallet}|1`);
  });
});
