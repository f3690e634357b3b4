import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Browser, Page } from "playwright-core";
import { launchBrowser, newPage, screenshot, servedGateway, STEP_MS, waitForText } from "./helpers/browser.ts";
import { SIWE_DOMAIN, type TestGateway } from "./helpers/gateway.ts";

// The page in real Chromium with no browser wallet at all: it still shows the models and prices, a wallet's credit by
// its address (with one of its API keys, its usage), and how to call the API with a key from a terminal.
let served: Awaited<ReturnType<typeof servedGateway>>;
let gw: TestGateway;
let origin: string;
let browser: Browser;
let page: Page;

beforeAll(async () => {
  // Keys are made the tests' usual way (signed for the helper's SIWE domain); the page itself never signs here.
  served = await servedGateway(null, { SIWE_DOMAIN });
  ({ gw, origin } = served);
  browser = await launchBrowser();
  page = await newPage(browser, { viewport: { width: 1100, height: 1400 } });
}, 90_000);

afterAll(async () => {
  await browser?.close();
  await served?.close();
}, 30_000);

const usd = (micro: number) =>
  `${new Intl.NumberFormat("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 6 }).format(micro / 1e6)} USD`;
const stored = () =>
  page.evaluate(() => ({
    session: Object.fromEntries(Object.entries(sessionStorage)) as Record<string, string>,
    local: localStorage.length,
    cookie: document.cookie,
  }));

async function lookUp(wallet: string, key: string): Promise<void> {
  await page.locator("#lookup-wallet").fill(wallet);
  await page.locator("#lookup-key").fill(key);
  await page.getByRole("button", { name: "Look up" }).click();
}

describe("the dashboard without a browser wallet", () => {
  test(
    "says no wallet was found, and still lists the models with their prices and a curl line for this origin",
    async () => {
      await page.goto(`${origin}/`);
      await waitForText(page, "#wallets", /^No browser wallet found\..*use an API key below\.$/);
      await waitForText(page, "#models tbody", /standin\/echo/);
      const echo = page.locator("#models tbody tr", { hasText: "standin/echo" }).first();
      expect((await echo.locator("td").allInnerTexts()).slice(1)).toEqual(["128,000", "2.5", "10", "standin"]);
      const listed = (await gw.call("GET", "/v1/models")).body.data.length;
      expect(await page.locator("#models tbody tr").count()).toBe(listed);
      await waitForText(page, "#cli-snippet", new RegExp(`^curl ${origin}/v1/chat/completions `));
      const snippet = await page.locator("#cli-snippet").innerText();
      expect(snippet).toContain('-H "Authorization: Bearer $KEY"');
      expect(snippet).toContain(`"model": "${(await gw.call("GET", "/v1/models")).body.data[0].id}"`);
      expect(await page.locator("#cli-base").innerText()).toBe(`${origin}/v1`);
      await expect(page.locator("#lookup-card").isVisible()).resolves.toBe(true);
      await screenshot(page, "dashboard-nowallet-01");
    },
    STEP_MS,
  );

  test(
    "a wallet's available credit by its address; with its key, the usage per key; the key kept in this tab only",
    async () => {
      const { wallet, key } = await gw.newWallet(2);
      await gw.openai(key).chat.completions.create({ model: "standin/echo", messages: [{ role: "user", content: "hello there" }] });
      const { balance, locked } = await gw.ledgerState(wallet);
      expect(balance).toBeLessThan(2_000_000);

      await lookUp(wallet, "");
      await waitForText(page, "#lookup-available", usd(balance - locked));
      await expect(page.locator("#lookup-keys").isVisible()).resolves.toBe(false);
      expect(served.statuses(`/v1/usage/${wallet}`)).toEqual([]);

      await lookUp(wallet, key);
      await waitForText(page, "#lookup-keys tbody", /^test #\d+\t1\t/);
      expect(await page.locator("#lookup-balance").innerText()).toBe(usd(balance));
      expect(await page.locator("#lookup-keys tbody td").last().innerText()).toBe(usd(2_000_000 - balance));
      expect(served.statuses(`/v1/usage/${wallet}`)).toEqual([200]);
      expect(await stored()).toEqual({ session: { "gw-lookup": JSON.stringify({ wallet, key }) }, local: 0, cookie: "" });
      await screenshot(page, "dashboard-nowallet-02-usage");

      // A reload in the same tab looks it up again; "Forget the key" drops it.
      await page.reload();
      await waitForText(page, "#lookup-keys tbody", /^test #\d+\t1\t/);
      expect(served.statuses(`/v1/usage/${wallet}`)).toEqual([200, 200]);
      await page.getByRole("button", { name: "Forget the key" }).click();
      await expect(page.locator("#lookup-key").inputValue()).resolves.toBe("");
      expect(await stored()).toEqual({ session: {}, local: 0, cookie: "" });
      // Another tab (a new browser context) has nothing.
      const other = await newPage(browser);
      await other.goto(`${origin}/`);
      await other.locator("#models tbody tr").first().waitFor();
      expect(await other.evaluate(() => sessionStorage.length)).toBe(0);
      await other.context().close();
    },
    STEP_MS,
  );

  test(
    "another wallet's key and a malformed address are explained; nothing is shown for them",
    async () => {
      const a = await gw.newWallet(1);
      const b = await gw.newWallet(1);
      await lookUp(a.wallet, b.key);
      await waitForText(page, "#lookup-error", /^This API key is not an active key of this wallet/);
      await expect(page.locator("#lookup-result").isVisible()).resolves.toBe(false);
      expect(served.statuses(`/v1/usage/${a.wallet}`)).toEqual([401]);

      await lookUp("0x1234", "");
      await waitForText(page, "#lookup-error", "Enter a wallet address: 0x followed by 40 hexadecimal digits.");
      await lookUp(a.wallet, "");
      await waitForText(page, "#lookup-available", "1.00 USD");
      await expect(page.locator("#lookup-error").isVisible()).resolves.toBe(false);
    },
    STEP_MS,
  );
});
