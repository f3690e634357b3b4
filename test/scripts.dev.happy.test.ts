/**
 * The local playground as docs/payments.md runs it, on ports other than the defaults: scripts/dev.ts serves the local
 * catalog and the echo model (a top-up paid as docs/payments.md "Pay from your own code" shows, a sign-in by
 * scripts/signin.ts, a chat with echo/echo), and a restart deploys the same token addresses and payer key while
 * the gateway keeps its data. Nothing is left listening after a stop.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { wrapFetchWithPayment as wrapV2, x402Client } from "@x402/fetch";
import OpenAI from "openai";
import type { Hex } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { createSigner, wrapFetchWithPayment as wrapV1 } from "x402-fetch";
import { freePort } from "./helpers/child.ts";
import { freshDatabase } from "./helpers/services.ts";

const ROOT = resolve(import.meta.dir, "..");
const [PORT, ECHO_PORT, DEV_CHAIN_PORT] = [freePort(), freePort(), freePort()];
const gateway = `http://localhost:${PORT}`;
let dir: string;
let db: Awaited<ReturnType<typeof freshDatabase>> | undefined;
let env: Record<string, string>;
let running: ReturnType<typeof Bun.spawn> | undefined;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "gw-dev-"));
  env = {
    PATH: process.env.PATH ?? "",
    HOME: process.env.HOME ?? "",
    PORT: String(PORT),
    ECHO_PORT: String(ECHO_PORT),
    DEV_CHAIN_PORT: String(DEV_CHAIN_PORT),
    DATA_DIR: join(dir, "data"),
    LOG_LEVEL: "info",
  };
  // The machine's Postgres when there is one (a fresh embedded one takes long to initialise on a busy machine).
  if (process.env.TEST_DATABASE_URL) {
    db = await freshDatabase();
    env.DATABASE_URL = db.database.url;
  }
});
afterAll(async () => {
  running?.kill("SIGTERM");
  await running?.exited;
  await db?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** `bun scripts/dev.ts` until its gateway listens; what it printed so far comes with it. */
async function startDev(): Promise<{ proc: ReturnType<typeof Bun.spawn>; printed: () => string }> {
  const proc = Bun.spawn(["bun", join(ROOT, "scripts/dev.ts")], { cwd: ROOT, env, stdout: "pipe", stderr: "pipe" });
  running = proc;
  let seen = "";
  let listening: () => void;
  const ready = new Promise<void>((r) => (listening = r));
  const read = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    const reader = stream.getReader();
    for (let r = await reader.read(); !r.done; r = await reader.read()) {
      seen += decoder.decode(r.value);
      if (seen.includes('"msg":"gateway listening"')) listening();
    }
  };
  const ended = Promise.all([
    read(proc.stdout as ReadableStream<Uint8Array>),
    read(proc.stderr as ReadableStream<Uint8Array>),
    proc.exited,
  ]);
  await Promise.race([ready, ended.then(() => Promise.reject(new Error(`dev.ts exited before its gateway listened: ${seen}`)))]);
  return { proc, printed: () => seen };
}

async function stopDev(proc: ReturnType<typeof Bun.spawn>): Promise<void> {
  proc.kill("SIGTERM");
  expect(await proc.exited).toBe(0);
  running = undefined;
  // Gateway, echo model and chain are all gone: each port can be bound again.
  for (const port of [PORT, ECHO_PORT, DEV_CHAIN_PORT]) Bun.listen({ hostname: "127.0.0.1", port, socket: { data() {} } }).stop(true);
}

const devInfo = () => JSON.parse(readFileSync(join(env.DATA_DIR!, "devchain.json"), "utf8"));
const topup = (pay: typeof fetch, usd: number) =>
  pay(`${gateway}/v1/topup`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ amount: usd }) });
const available = async (wallet: string) => (await (await fetch(`${gateway}/v1/balance/${wallet}`)).json()).available_usdc;

test("dev.ts on other ports: models, a top-up, a sign-in and a chat; a restart keeps addresses, key and credit", async () => {
  let dev = await startDev();
  const first = devInfo();
  expect(first).toMatchObject({ gateway, rpcUrl: `http://127.0.0.1:${DEV_CHAIN_PORT}`, echoModel: `http://127.0.0.1:${ECHO_PORT}/v1` });
  expect(dev.printed()).toContain(`export PORT=${PORT} PRIVATE_KEY=${first.payerKey} USDC=${first.usdc.address}`);
  const payer = privateKeyToAccount(first.payerKey as Hex).address;

  const models = await (await fetch(`${gateway}/v1/models`)).json();
  expect(models.data.map((m: { id: string }) => m.id)).toContain("echo/echo");

  // docs/payments.md, Pay from your own code, x402 v1: maxValue raised to the amount.
  const v1 = wrapV1(fetch, (await createSigner("base-sepolia", first.payerKey)) as never, 5_000_000n) as typeof fetch;
  const paid = await topup(v1, 5);
  expect(paid.status).toBe(200);
  expect(await paid.json()).toEqual({ balance_usdc: 5_000_000, credited_usdc: 5_000_000 });

  // scripts/signin.ts finds the gateway by PORT alone.
  const signin = Bun.spawnSync(["bun", join(ROOT, "scripts/signin.ts")], {
    env: { PATH: env.PATH!, PORT: String(PORT), PRIVATE_KEY: first.payerKey },
    stdout: "pipe",
    stderr: "pipe",
  });
  expect(signin.exitCode).toBe(0);
  const key = /^KEY=(\S+)$/m.exec(signin.stdout.toString())![1]!;
  expect(signin.stdout.toString()).toContain(`WALLET=${payer.toLowerCase()}`);

  // The echo model answers through the local catalog: its baseUrl took ECHO_PORT. 4 prompt tokens at 1 USD/M and
  // 2 completion tokens at 2 USD/M: 8 µUSDC.
  const openai = new OpenAI({ baseURL: `${gateway}/v1`, apiKey: key });
  const answer = await openai.chat.completions.create({ model: "echo/echo", messages: [{ role: "user", content: "hello" }] });
  expect(answer.choices[0]!.message.content).toBe("echo: hello");
  expect(answer.usage).toMatchObject({ prompt_tokens: 4, completion_tokens: 2 });
  expect(await available(payer)).toBe(4_999_992);
  await stopDev(dev.proc);

  dev = await startDev();
  const second = devInfo();
  for (const field of ["payerKey", "payTo"]) expect(second[field]).toBe(first[field]);
  expect(second.usdc.address).toBe(first.usdc.address);
  expect(second.usdt.address).toBe(first.usdt.address);
  expect(await available(payer)).toBe(4_999_992);

  // docs/payments.md, Pay from your own code, x402 v2: the dev chain's USDC allowed by spend controls, on the first try.
  const client = new x402Client();
  registerExactEvmScheme(client, { signer: privateKeyToAccount(second.payerKey as Hex) });
  client.setSpendControls({
    maxAmountPerPayment: "$5",
    allowedAssets: [{ network: "eip155:84532", asset: second.usdc.address, maxAmountPerPayment: "5000000" }],
  });
  const again = await topup(wrapV2(fetch, client) as typeof fetch, 5);
  expect(again.status).toBe(200);
  expect(await again.json()).toEqual({ balance_usdc: 9_999_992, credited_usdc: 5_000_000 });

  // examples/agent-pays.ts (docs/payments.md, Agents that pay) as written: a new wallet's key, empty, and the dev
  // payer's key paying 1 USD from the call; the answer comes, and the wallet keeps 1 USD less the charge.
  const fresh = Bun.spawnSync(["bun", join(ROOT, "scripts/signin.ts")], {
    env: { PATH: env.PATH!, PORT: String(PORT) },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [, freshWallet, freshKey] = /WALLET=(\S+)\nKEY=(\S+)/.exec(fresh.stdout.toString())!;
  const agent = Bun.spawnSync(["bun", join(ROOT, "examples/agent-pays.ts")], {
    cwd: ROOT,
    env: { PATH: env.PATH!, HOME: env.HOME!, PORT: String(PORT), PRIVATE_KEY: second.payerKey, USDC: second.usdc.address, KEY: freshKey! },
    stdout: "pipe",
    stderr: "pipe",
  });
  expect({ code: agent.exitCode, err: agent.exitCode === 0 ? "" : agent.stderr.toString() }).toEqual({ code: 0, err: "" });
  expect(agent.stdout.toString()).toBe("echo: Hello, gateway\n");
  expect(await available(freshWallet!)).toBe(1_000_000 - 11);
  await stopDev(dev.proc);
}, 120_000);
