/**
 * Real headless Chromium (the OS's `chromium` package, driven by playwright-core; nothing downloaded) with an
 * injected EIP-1193 wallet: the page sees an ordinary browser wallet announced by EIP-6963, whose requests are
 * answered in the test process by a viem account (signatures) and the local anvil chain (everything else).
 */
import { mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { type Browser, chromium, type Page } from "playwright-core";
import type { Hex } from "viem";
import type { PrivateKeyAccount } from "viem/accounts";
import type { DevChain } from "./chain.ts";
import { startGateway } from "./gateway.ts";

export const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
export const ARTIFACTS = resolve(import.meta.dir, "../artifacts");

export function launchBrowser(): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM, args: ARGS });
}

/**
 * How long one browser action or wait may take. Playwright's own default is no limit, so a stuck wait would run on
 * past its test's timeout, into the next test (bun starts it while the old body still clicks): this keeps every
 * wait inside the test that started it, failing there with what it waited for.
 */
export const ACTION_MS = 40_000;
/** A browser test's own limit: above ACTION_MS, so a slow action fails as itself, not as a test timeout. */
export const STEP_MS = 60_000;

/** A new page whose every action and wait is bounded by ACTION_MS. */
export async function newPage(browser: Browser, options: Parameters<Browser["newContext"]>[0] = {}): Promise<Page> {
  const page = await (await browser.newContext(options)).newPage();
  page.setDefaultTimeout(ACTION_MS);
  return page;
}

/**
 * Waits until the text of `selector` is `expected` (a RegExp: matches it). The page renders after its reads answer,
 * so reading right after a click can see the screen before: a test waits for what a person would wait to see.
 */
export async function waitForText(page: Page, selector: string, expected: string | RegExp): Promise<void> {
  const want = typeof expected === "string" ? { exact: expected } : { source: expected.source, flags: expected.flags };
  try {
    await page.waitForFunction(
      ({ selector, want }) => {
        const text = (document.querySelector(selector) as HTMLElement | null)?.innerText;
        if (text === undefined) return false;
        return "exact" in want ? text === want.exact : new RegExp(want.source!, want.flags).test(text);
      },
      { selector, want },
    );
  } catch (e) {
    const seen = await page
      .locator(selector)
      .innerText({ timeout: 1_000 })
      .catch(() => "(absent)");
    throw new Error(
      `${selector}: waited for ${String(expected)}, the page shows ${JSON.stringify(seen)} (${(e as Error).message.split("\n")[0]})`,
    );
  }
}

/** A full-page screenshot in test/artifacts/ (gitignored), one per step, for a person to look at. */
export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}

/** The test wallet's side: what it was asked, and a switch to refuse the next signature as a person would. */
export interface TestWallet {
  chainId: number;
  /** Methods in the order the page called them. */
  calls: string[];
  /** The next signing request fails with EIP-1193 code 4001 (user rejected). */
  rejectNext: boolean;
}

const SIGNING = new Set(["personal_sign", "eth_signTypedData_v4"]);

/** typed-data JSON (numbers as strings, EIP712Domain listed) → what viem's signTypedData takes. */
function typedDataFromJson(json: string) {
  const td = JSON.parse(json) as {
    domain: Record<string, unknown>;
    types: Record<string, { name: string; type: string }[]>;
    primaryType: string;
    message: Record<string, unknown>;
  };
  const { EIP712Domain: _, ...types } = td.types;
  const message: Record<string, unknown> = { ...td.message };
  for (const f of types[td.primaryType] ?? []) if (/^u?int\d*$/.test(f.type)) message[f.name] = BigInt(String(message[f.name]));
  return {
    domain: { ...td.domain, chainId: td.domain.chainId === undefined ? undefined : Number(td.domain.chainId) },
    types,
    primaryType: td.primaryType,
    message,
  };
}

/**
 * Installs the wallet into every page of `page`'s context before any script runs. It starts on `startChainId`
 * (another network, so the page has to ask it to switch) and knows only that and the dev chain.
 */
export async function injectWallet(page: Page, account: PrivateKeyAccount, chain: DevChain, startChainId = 1): Promise<TestWallet> {
  const state: TestWallet = { chainId: startChainId, calls: [], rejectNext: false };
  await page.exposeFunction("__testWalletRequest", async (method: string, params: unknown[]) => {
    state.calls.push(method);
    try {
      if (SIGNING.has(method) && state.rejectNext) {
        state.rejectNext = false;
        return { error: { code: 4001, message: "User rejected the request." } };
      }
      switch (method) {
        case "eth_requestAccounts":
        case "eth_accounts":
          return { result: [account.address] };
        case "eth_chainId":
          return { result: `0x${state.chainId.toString(16)}` };
        case "wallet_switchEthereumChain": {
          const id = Number((params[0] as { chainId: string }).chainId);
          if (id !== chain.chainId && id !== 1) return { error: { code: 4902, message: "Unrecognized chain ID." } };
          state.chainId = id;
          return { result: null, chainChanged: `0x${id.toString(16)}` };
        }
        case "personal_sign":
          return { result: await account.signMessage({ message: { raw: params[0] as Hex } }) };
        case "eth_signTypedData_v4":
          return { result: await account.signTypedData(typedDataFromJson(params[1] as string) as never) };
        default:
          if (state.chainId !== chain.chainId)
            return { error: { code: -32603, message: `test wallet: no node for chain ${state.chainId}` } };
          return { result: await chain.rpc(method, params) };
      }
    } catch (e) {
      return { error: { code: -32603, message: e instanceof Error ? e.message : String(e) } };
    }
  });
  await page.addInitScript(() => {
    const listeners: Record<string, ((x: unknown) => void)[]> = {};
    const bridge = (
      window as unknown as {
        __testWalletRequest: (
          m: string,
          p: unknown[],
        ) => Promise<{ result?: unknown; error?: { code: number; message: string }; chainChanged?: string }>;
      }
    ).__testWalletRequest;
    const provider = {
      async request({ method, params }: { method: string; params?: unknown[] }) {
        const r = await bridge(method, params ?? []);
        if (r.error) throw Object.assign(new Error(r.error.message), { code: r.error.code });
        if (r.chainChanged) for (const f of listeners.chainChanged ?? []) f(r.chainChanged);
        return r.result;
      },
      on(event: string, f: (x: unknown) => void) {
        (listeners[event] ??= []).push(f);
      },
      removeListener(event: string, f: (x: unknown) => void) {
        listeners[event] = (listeners[event] ?? []).filter((g) => g !== f);
      },
    };
    const icon =
      "data:image/svg+xml," +
      encodeURIComponent(
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="8" fill="#7b3fe4"/><path d="M9 11h14v10H9z" fill="#fff"/></svg>',
      );
    const detail = Object.freeze({
      info: { uuid: "6f1c1f3e-2a57-4c8e-9d0b-1a2b3c4d5e6f", name: "Test Wallet", icon, rdns: "test.wallet" },
      provider,
    });
    const announce = () => window.dispatchEvent(new CustomEvent("eip6963:announceProvider", { detail }));
    window.addEventListener("eip6963:requestProvider", announce);
    announce();
  });
  return state;
}

/**
 * The gateway behind a real HTTP port (Chromium cannot call `app.handle`), its SIWE domain that very origin;
 * paid on `chain`, or with top-ups off when there is none.
 */
export async function servedGateway(chain: DevChain | null, env: Record<string, string> = {}) {
  let handle: (r: Request) => Promise<Response> = async () => new Response("starting", { status: 503 });
  // What the gateway answered, by path: seen here, at the server, rather than through the driver's network events.
  const answers: { path: string; status: number }[] = [];
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: async (r) => {
      const res = await handle(r);
      answers.push({ path: new URL(r.url).pathname, status: res.status });
      return res;
    },
  });
  const origin = `http://127.0.0.1:${server.port}`;
  const payments = chain ? { ...chain.gatewayEnv(), SIWE_CHAIN_IDS: String(chain.chainId) } : {};
  const gw = await startGateway({ ...payments, SIWE_DOMAIN: `127.0.0.1:${server.port}`, ...env });
  handle = gw.handle;
  return {
    gw,
    origin,
    /** The statuses the gateway answered on `path`, in order. */
    statuses: (path: string) => answers.filter((a) => a.path === path).map((a) => a.status),
    async close() {
      await server.stop(true);
      await gw.close();
    },
  };
}
