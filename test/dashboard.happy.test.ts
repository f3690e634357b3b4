import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Browser, Page } from "playwright-core";
import type { PrivateKeyAccount } from "viem/accounts";
import {
  injectWallet,
  launchBrowser,
  newPage,
  screenshot,
  servedGateway,
  STEP_MS,
  type TestWallet,
  waitForText,
} from "./helpers/browser.ts";
import { startChain, type DevChain } from "./helpers/chain.ts";
import { expectedCharge, type TestGateway } from "./helpers/gateway.ts";
import { usageFor } from "./helpers/openaiStandin.ts";

// The page in real Chromium against the real gateway (HTTP on a free port) on a local anvil chain, paid and signed
// by an injected EIP-1193 wallet backed by a viem account.
let chain: DevChain;
let gw: TestGateway;
let served: Awaited<ReturnType<typeof servedGateway>>;
let browser: Browser;
let page: Page;
let payer: PrivateKeyAccount;
let wallet: TestWallet;
let origin: string;

beforeAll(async () => {
  chain = await startChain();
  served = await servedGateway(chain);
  ({ gw, origin } = served);
  payer = await chain.newPayer(100);
  browser = await launchBrowser();
  page = await newPage(browser, { viewport: { width: 1100, height: 900 } });
  await page.context().grantPermissions(["clipboard-read", "clipboard-write"], { origin });
  wallet = await injectWallet(page, payer, chain);
}, 90_000);

afterAll(async () => {
  await browser?.close();
  await served?.close();
  await chain?.stop();
}, 30_000);

const text = (selector: string) => page.locator(selector).innerText();
const ledger = () => gw.ledgerState(payer.address.toLowerCase());

describe("the dashboard in Chromium with a browser wallet", () => {
  test(
    "served at / in one small script, from the program itself",
    async () => {
      const res = await fetch(`${origin}/`, { headers: { "accept-encoding": "gzip" } });
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toContain("text/html");
      expect(res.headers.get("content-security-policy")).toContain("connect-src 'self'");
      const html = await res.text();
      const src = /<script type="module" src="([^"]+)"/.exec(html)![1]!;
      const js = await fetch(`${origin}${src}`, { headers: { "accept-encoding": "identity" } });
      expect(js.status).toBe(200);
      expect(js.headers.get("cache-control")).toContain("immutable");
      const bytes = (await js.arrayBuffer()).byteLength;
      // First paint: the one script, under 200 KB before compression.
      expect(bytes).toBeLessThan(200 * 1024);
      expect((await fetch(`${origin}/dashboard/app.0000.js`)).status).toBe(404);
      // Like every extension, the page is in the OpenAPI document.
      const doc = await (await fetch(`${origin}/docs/json`)).json();
      expect(doc.paths["/"].get.summary).toBe("The wallet dashboard (HTML)");
    },
    STEP_MS,
  );

  test(
    "connect: the wallet appears by its EIP-6963 name; the public balance shows at once",
    async () => {
      await page.goto(`${origin}/`);
      const button = page.getByRole("button", { name: "Test Wallet" });
      await button.waitFor();
      await expect(page.locator("#network").innerText()).resolves.toBe(`Local dev chain (chain id ${chain.chainId})`);
      await screenshot(page, "dashboard-01-connect");
      await button.click();
      await page.locator("#dash").waitFor();
      await expect(text("#account")).resolves.toContain(payer.address.slice(0, 6));
      await waitForText(page, "#available", "0.00 USD");
      await expect(page.locator("#keys-card").isVisible()).resolves.toBe(false);
      await screenshot(page, "dashboard-02-connected");
    },
    STEP_MS,
  );

  test(
    "sign in: one SIWE signature shows keys, usage and history",
    async () => {
      const signed = wallet.calls.filter((c) => c === "personal_sign").length;
      await page.getByRole("button", { name: "Sign in with Ethereum" }).click();
      await waitForText(page, "#keys tbody", /No keys yet/);
      await expect(text("#session-line")).resolves.toContain("Signed in until");
      expect(wallet.calls.filter((c) => c === "personal_sign").length).toBe(signed + 1);
      // Each signature starts from a fresh nonce.
      expect(served.statuses("/v1/auth/siwe")).toEqual([200]);
      await screenshot(page, "dashboard-03-signed-in");
    },
    STEP_MS,
  );

  test(
    "top up 5 USDC (EIP-3009): the wallet switches network and signs; balance on screen, in the ledger and on chain",
    async () => {
      const before = {
        payer: await chain.balanceOf(chain.usdc.address, payer.address),
        payTo: await chain.balanceOf(chain.usdc.address, chain.payTo),
      };
      await page.locator("#topup-amount").fill("5");
      await page.locator("#topup-asset").selectOption("USDC");
      await page.getByRole("button", { name: "Top up" }).click();
      await waitForText(page, "#topup-result", /Credited 5\.00 USD \(paid in USDC\)\. New balance: 5\.00 USD\./);
      await waitForText(page, "#available", "5.00 USD");
      expect(wallet.chainId).toBe(chain.chainId);
      expect(wallet.calls).toContain("wallet_switchEthereumChain");
      expect(await ledger()).toEqual({ balance: 5_000_000, locked: 0 });
      expect(before.payer - (await chain.balanceOf(chain.usdc.address, payer.address))).toBe(5_000_000n);
      expect((await chain.balanceOf(chain.usdc.address, chain.payTo)) - before.payTo).toBe(5_000_000n);
      // The settlement transaction is shown and listed in the history, and it is on chain.
      const tx = (await page.locator("#topup-result [title]").getAttribute("title"))!;
      expect(tx).toMatch(/^0x[0-9a-f]{64}$/);
      expect(((await chain.rpc("eth_getTransactionReceipt", [tx])) as { status: string }).status).toBe("0x1");
      await page.waitForFunction(() => document.querySelectorAll("#history tbody tr [title]").length === 1);
      await expect(page.locator("#history tbody [title]").first().getAttribute("title")).resolves.toBe(tx);
      await page.waitForFunction(() => document.getElementById("wallet-tokens")!.textContent!.includes(" 95 USDC"));
      await screenshot(page, "dashboard-04-topup-usdc");
    },
    STEP_MS,
  );

  test(
    "top up 3.25 USDT (EIP-2612 permit): balance 8.25 on screen, in the ledger and on chain",
    async () => {
      const before = await chain.balanceOf(chain.usdt.address, payer.address);
      await page.locator("#topup-amount").fill("3.25");
      await page.locator("#topup-asset").selectOption("USDT");
      await page.getByRole("button", { name: "Top up" }).click();
      await waitForText(page, "#topup-result", /Credited 3\.25 USD \(paid in USDT\)\. New balance: 8\.25 USD\./);
      await waitForText(page, "#available", "8.25 USD");
      expect(await ledger()).toEqual({ balance: 8_250_000, locked: 0 });
      expect(before - (await chain.balanceOf(chain.usdt.address, payer.address))).toBe(3_250_000n);
      await page.waitForFunction(() => document.querySelectorAll("#history tbody tr [title]").length === 2);
      await expect(text("#balance")).resolves.toBe("8.25 USD");
      await screenshot(page, "dashboard-05-topup-usdt");
    },
    STEP_MS,
  );

  let key = "";
  test(
    "create a key: a fresh signature, the plaintext shown once with a copy button; it calls chat through the openai SDK",
    async () => {
      const signed = wallet.calls.filter((c) => c === "personal_sign").length;
      await page.locator("#key-label").fill("ci-app");
      await page.locator("#key-budget").fill("2");
      await page.getByRole("button", { name: "Create key" }).click();
      await page.locator("#new-key").waitFor();
      key = await page.locator("#new-key-value").inputValue();
      expect(key).toMatch(/^sk-[0-9a-f]{64}$/);
      expect(wallet.calls.filter((c) => c === "personal_sign").length).toBe(signed + 1);
      await expect(text("#new-key")).resolves.toContain("shown only this once");
      await page.getByRole("button", { name: "Copy", exact: true }).click();
      // The copy is asynchronous in the page: wait for the clipboard to hold the key.
      await page.waitForFunction(async (k) => (await navigator.clipboard.readText()) === k, key);
      // The table is read again after the creation: the new key appears there, active.
      await waitForText(page, "#keys tbody tr:first-child", /ci-app/);
      await waitForText(page, "#keys tbody tr:first-child .state", "active");
      await screenshot(page, "dashboard-06-key-created");

      const messages = [{ role: "user" as const, content: "Say hello." }];
      const completion = await gw.openai(key).chat.completions.create({ model: "standin/echo", messages, max_tokens: 50 });
      expect(completion.choices[0]!.message.content).toBeTruthy();
      const u = usageFor(messages.length);
      const charge = expectedCharge(u.prompt_tokens, u.completion_tokens);
      await gw.services.flusher.drain();

      await page.getByRole("button", { name: "I have stored it" }).click();
      await expect(page.locator("#new-key").isVisible()).resolves.toBe(false);
      await page.getByRole("button", { name: "Refresh" }).click();
      const row = page.locator("#keys tbody tr").first();
      await page.waitForFunction(() => document.querySelector("#keys tbody tr .num")?.textContent === "1");
      await expect(row.locator(".spend").innerText()).resolves.toBe(
        `${(charge / 1e6).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 6 })} USD`,
      );
      await expect(row.locator("td").nth(4).innerText()).resolves.toBe(`${u.prompt_tokens} / ${u.completion_tokens}`);
      await expect(page.locator("#chart rect").count()).resolves.toBe(1);
      await expect(text("#legend")).resolves.toContain("ci-app #");
      expect(await ledger()).toEqual({ balance: 8_250_000 - charge, locked: 0 });
      await screenshot(page, "dashboard-07-usage");
    },
    STEP_MS,
  );

  test(
    "revoke after a confirmation and a fresh signature: the key stops working at once",
    async () => {
      const signed = wallet.calls.filter((c) => c === "personal_sign").length;
      await page.locator("#keys tbody tr").first().getByRole("button", { name: "Revoke" }).click();
      await page.locator("#confirm").waitFor();
      await expect(text("#confirm-text")).resolves.toContain("Apps using it stop working at once");
      await screenshot(page, "dashboard-08-revoke-confirm");
      await page.locator("#confirm-ok").click();
      await page.waitForFunction(() => document.querySelector("#keys tbody tr .state")?.textContent?.startsWith("revoked"));
      expect(wallet.calls.filter((c) => c === "personal_sign").length).toBe(signed + 1);
      const err = await gw
        .openai(key)
        .chat.completions.create({ model: "standin/echo", messages: [{ role: "user", content: "hi" }] })
        .catch((e: { status: number }) => e);
      expect((err as { status: number }).status).toBe(401);
      await screenshot(page, "dashboard-09-revoked");
    },
    STEP_MS,
  );

  test(
    "a reload keeps the session (no new signature) until it runs out",
    async () => {
      const signed = wallet.calls.filter((c) => c === "personal_sign").length;
      await page.reload();
      await page.getByRole("button", { name: "Test Wallet" }).click();
      await page.locator("#keys tbody tr").first().waitFor();
      await expect(text("#keys tbody")).resolves.toContain("ci-app");
      expect(wallet.calls.filter((c) => c === "personal_sign").length).toBe(signed);
    },
    STEP_MS,
  );
});
