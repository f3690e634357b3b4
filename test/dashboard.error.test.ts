import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Browser, Page } from "playwright-core";
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from "viem/accounts";
import { ApiFailure, explain } from "../src/dashboard/page/api.ts";
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
import { captureErrors } from "./helpers/logs.ts";

// What a wallet owner reads when something goes wrong: real failures in Chromium where they can be caused for
// real (a declined signature, an empty wallet, a refused session, an unreachable facilitator), and the wording
// of every status the API can answer.
let chain: DevChain;
let served: Awaited<ReturnType<typeof servedGateway>>;
let deadFacilitator: Awaited<ReturnType<typeof servedGateway>>;
let unpaid: Awaited<ReturnType<typeof servedGateway>>;
let browser: Browser;

beforeAll(async () => {
  chain = await startChain();
  served = await servedGateway(chain);
  // The same deployment whose EIP-3009 facilitator is down: POST /v1/topup answers 503.
  deadFacilitator = await servedGateway(chain, {
    FACILITATOR: "http",
    FACILITATOR_URL: "http://127.0.0.1:9",
    FACILITATOR_TIMEOUT_MS: "2000",
  });
  // A gateway without payments configured.
  unpaid = await servedGateway(null, { SIWE_CHAIN_IDS: String(chain.chainId) });
  browser = await launchBrowser();
}, 90_000);

afterAll(async () => {
  await browser?.close();
  await served?.close();
  await deadFacilitator?.close();
  await unpaid?.close();
  await chain?.stop();
}, 30_000);
const errors = captureErrors(/"payment facilitator unavailable"/);

/** A page with the wallet of `account` connected (on the payment network already). */
async function connected(origin: string, account: PrivateKeyAccount): Promise<{ page: Page; wallet: TestWallet }> {
  const page = await newPage(browser, { viewport: { width: 1100, height: 900 } });
  const wallet = await injectWallet(page, account, chain, chain.chainId);
  await page.goto(`${origin}/`);
  await page.getByRole("button", { name: "Test Wallet" }).click();
  await page.locator("#dash").waitFor();
  return { page, wallet };
}

async function topUp(page: Page, amount: string, asset = "USDC"): Promise<void> {
  await page.locator("#topup-amount").fill(amount);
  await page.locator("#topup-asset").selectOption(asset);
  await page.getByRole("button", { name: "Top up" }).click();
  await page.locator("#topup-error").waitFor();
}

describe("errors in the browser", () => {
  test(
    "a signature declined in the wallet: said so, nothing changed",
    async () => {
      const account = await chain.newPayer(10);
      const { page, wallet } = await connected(served.origin, account);
      wallet.rejectNext = true;
      await page.getByRole("button", { name: "Sign in with Ethereum" }).click();
      await page.locator("#credit-error").waitFor();
      expect(await page.locator("#credit-error").innerText()).toBe("You declined the request in your wallet. Nothing was changed.");
      await expect(page.locator("#keys-card").isVisible()).resolves.toBe(false);
      await page.context().close();
    },
    STEP_MS,
  );

  test(
    "402: a wallet without the tokens is told so, nothing is charged or credited",
    async () => {
      const empty = privateKeyToAccount(generatePrivateKey());
      const { page } = await connected(served.origin, empty);
      await topUp(page, "5");
      expect(await page.locator("#topup-error").innerText()).toBe(
        `The payment was refused: your wallet does not hold enough of this token. Nothing was charged (check your USDC on Local dev chain (chain id ${chain.chainId})).`,
      );
      await expect(page.locator("#topup-steps li.failed").innerText()).resolves.toContain("Settling on chain");
      expect(await served.gw.ledgerState(empty.address.toLowerCase())).toEqual({ balance: 0, locked: 0 });
      await screenshot(page, "dashboard-error-402");
      await page.context().close();
    },
    STEP_MS,
  );

  test(
    "below the minimum: refused on the page before any request or signature",
    async () => {
      const account = await chain.newPayer(10);
      const { page, wallet } = await connected(served.origin, account);
      const before = wallet.calls.length;
      await topUp(page, "0.5");
      expect(await page.locator("#topup-error").innerText()).toBe(
        "The gateway did not accept the request: amount: at least 1 USD, with at most 6 decimals.",
      );
      expect(wallet.calls.slice(before).filter((c) => c.startsWith("eth_sign") || c === "personal_sign")).toEqual([]);
      await page.context().close();
    },
    STEP_MS,
  );

  test(
    "401: a session the gateway refuses ends it, and the sign-in button says why",
    async () => {
      const account = await chain.newPayer(10);
      const { page } = await connected(served.origin, account);
      await page.getByRole("button", { name: "Sign in with Ethereum" }).click();
      await page.locator("#keys tbody tr").first().waitFor();
      // The stored session is damaged (as if signed for another gateway); the next read is refused.
      await page.evaluate(() => {
        for (const k of Object.keys(sessionStorage)) {
          const s = JSON.parse(sessionStorage.getItem(k)!);
          s.message = s.message.replace(/Nonce: \w+/, "Nonce: tampered0");
          sessionStorage.setItem(k, JSON.stringify(s));
        }
      });
      await page.reload();
      await page.getByRole("button", { name: "Test Wallet" }).click();
      await page.waitForFunction(() => !document.getElementById("signin-box")!.hidden);
      expect(await page.locator("#signin-text").innerText()).toBe(
        "Your sign-in has run out or was not accepted (a sign-in lasts 10 minutes, and each change needs a fresh signature). Sign in again to continue; nothing was changed.",
      );
      await expect(page.locator("#keys-card").isVisible()).resolves.toBe(false);
      await screenshot(page, "dashboard-error-401");
      // One click signs again.
      await page.getByRole("button", { name: "Sign in with Ethereum" }).click();
      await page.locator("#keys tbody tr").first().waitFor();
      await page.context().close();
    },
    STEP_MS,
  );

  test(
    "503: an unreachable facilitator is explained; the payer's tokens stay put",
    async () => {
      const account = await chain.newPayer(10);
      const before = await chain.balanceOf(chain.usdc.address, account.address);
      const { page } = await connected(deadFacilitator.origin, account);
      await topUp(page, "2");
      expect(await page.locator("#topup-error").innerText()).toContain("The payment service (facilitator) cannot be reached right now.");
      expect(errors.take(/"payment facilitator unavailable"/)).toHaveLength(1);
      expect(await chain.balanceOf(chain.usdc.address, account.address)).toBe(before);
      expect(await deadFacilitator.gw.ledgerState(account.address.toLowerCase())).toEqual({ balance: 0, locked: 0 });
      await screenshot(page, "dashboard-error-503");
      await page.context().close();
    },
    STEP_MS,
  );
});

test(
  "a gateway without GET /v1/auth/siwe (older): the page signs by the rules written into it",
  async () => {
    const page = await newPage(browser);
    await injectWallet(page, await chain.newPayer(1), chain, chain.chainId);
    await page.route("**/v1/auth/siwe", (r) =>
      r.fulfill({ status: 404, contentType: "application/json", body: '{"error":"NOT_FOUND","message":"No such route"}' }),
    );
    await page.goto(`${served.origin}/`);
    await page.getByRole("button", { name: "Test Wallet" }).click();
    await page.getByRole("button", { name: "Sign in with Ethereum" }).click();
    await page.waitForFunction(() => document.querySelector("#keys tbody")?.textContent?.includes("No keys yet"));
    await page.context().close();
  },
  STEP_MS,
);

test(
  "a gateway without top-ups says so instead of offering a form that cannot work; signing in still works",
  async () => {
    const { page } = await connected(unpaid.origin, await chain.newPayer(1));
    await expect(page.locator("#topup-form").isVisible()).resolves.toBe(false);
    expect(await page.locator("#wallet-tokens").innerText()).toBe("Top-ups are not enabled on this gateway. Ask its operator for credit.");
    await page.getByRole("button", { name: "Sign in with Ethereum" }).click();
    await page.waitForFunction(() => document.querySelector("#keys tbody")?.textContent?.includes("No keys yet"));
    await page.context().close();
  },
  STEP_MS,
);

describe("the words for each answer", () => {
  const f = (status: number, body: Record<string, unknown> = {}, retry?: number) => new ApiFailure(status, body, retry);
  test("API statuses in the contexts the page meets them", () => {
    expect(explain(f(0), "read")).toStartWith("The gateway cannot be reached.");
    expect(explain(f(400, { error: "VALIDATION_ERROR", message: "ref_code and redeem_code are mutually exclusive" }), "create-key")).toBe(
      "The gateway did not accept the request: ref_code and redeem_code are mutually exclusive.",
    );
    expect(explain(f(400, { error: "mismatched payment: amount" }), "topup")).toBe(
      "The gateway did not accept this payment (mismatched payment: amount). Nothing was charged; try again.",
    );
    expect(explain(f(401, { error: "UNAUTHORIZED", message: "x" }), "read", { sessionMinutes: 10 })).toStartWith(
      "Your sign-in has run out or was not accepted",
    );
    expect(
      explain(f(401, { error: "UNAUTHORIZED", message: "SIWE rejected: chain: Chain ID must be one of 8453" }), "sign-in"),
    ).toStartWith(
      "The gateway did not accept the sign-in (SIWE rejected: chain: Chain ID must be one of 8453). Check your computer's clock",
    );
    expect(explain(f(402, { error: "INSUFFICIENT_BALANCE", message: "x" }), "read")).toBe(
      "Your credit is too low for this request. Top up to continue.",
    );
    expect(explain(f(402, { error: "KEY_BUDGET_EXCEEDED", message: "x" }), "read")).toStartWith("This API key has used up its budget.");
    expect(explain(f(402, { x402Version: 1, error: "invalid_exact_evm_payload_authorization_valid_before", accepts: [] }), "topup")).toBe(
      "The payment was refused: the signed payment expired before it reached the chain. Nothing was charged.",
    );
    expect(explain(f(402, { x402Version: 1, error: "something_new", accepts: [] }), "topup")).toBe(
      "The payment was refused: something_new. Nothing was charged.",
    );
    expect(explain(f(404, { error: "NOT_FOUND", message: "x" }), "revoke-key")).toStartWith(
      "That key does not exist for this wallet any more.",
    );
    expect(explain(f(429, { error: "RATE_LIMITED", message: "x" }, 12), "read")).toBe(
      "Too many requests from this wallet. Try again in 12 seconds.",
    );
    expect(explain(f(429, { error: "RATE_LIMITED", message: "x" }), "read")).toBe(
      "Too many requests from this wallet. Try again in a moment.",
    );
    expect(explain(f(429, { error: "UPSTREAM_CLIENT_ERROR", message: "x" }, 1), "read")).toBe(
      "The model provider is limiting requests. Try again in 1 second.",
    );
    expect(explain(f(503, { error: "payment facilitator unavailable" }), "topup")).toStartWith(
      "The payment service (facilitator) cannot be reached right now.",
    );
    expect(explain(f(503, { error: "top-ups are not configured on this deployment" }), "topup")).toBe(
      "Top-ups are not enabled on this gateway. Ask its operator.",
    );
    expect(explain(f(503, {}, 30), "read")).toBe("The gateway is temporarily unavailable. Try again in 30 seconds.");
    expect(explain(f(500, { error: "INTERNAL_ERROR", message: "Internal server error" }), "create-key")).toStartWith(
      "The gateway hit an internal error (HTTP 500).",
    );
  });

  test("wallet errors by their EIP-1193 codes", () => {
    const err = (code: number) => Object.assign(new Error("x"), { code });
    expect(explain(err(4001), "sign-in")).toBe("You declined the request in your wallet. Nothing was changed.");
    expect(explain(err(4902), "topup", { network: "Base" })).toBe(
      "Your wallet does not know the Base network yet. Add it in your wallet, then try again.",
    );
    expect(explain(err(-32002), "topup")).toStartWith("Your wallet already has a request waiting.");
    // viem wraps the provider's error; its code is on the cause.
    expect(explain(Object.assign(new Error("wrapped"), { cause: { code: 4001 } }), "sign-in")).toStartWith("You declined");
    expect(explain(Object.assign(new Error("Internal JSON-RPC error.\nDetails: x"), { code: -32603 }), "topup")).toBe(
      "The wallet reported a problem: Internal JSON-RPC error.",
    );
    expect(explain(new Error("the gateway does not take USDT for this amount"), "topup")).toBe(
      "The gateway does not take USDT for this amount.",
    );
  });
});
