/**
 * RPC URLs carry the node provider's API key in their path (https://base-mainnet.g.alchemy.com/v2/<key>): they
 * never reach a log line nor `payment_checks.reason`. The error text is viem's own, from a real failed call.
 */
import { describe, expect, test } from "bun:test";
import { createPublicClient, http } from "viem";
import { log, redactText, setLogLevel } from "../src/log.ts";
import type { MatchedPayment } from "../src/payments/payment.ts";
import { sharedGateway, startGateway } from "./helpers/gateway.ts";

const SECRET = "k3yS3cretAlchemy0123456789abcdef";
const RPC_URL = `http://127.0.0.1:9/v2/${SECRET}`; // port 9: nothing listens, the call fails at once

const gw = sharedGateway();

/** Runs `fn` with stderr/stdout captured (the logger writes JSON lines there) at log level warn. */
async function captureLogs(fn: () => Promise<void>): Promise<string> {
  const lines: string[] = [];
  const [err, out] = [process.stderr.write, process.stdout.write];
  const grab = (chunk: unknown) => (lines.push(String(chunk)), true);
  process.stderr.write = grab as typeof process.stderr.write;
  process.stdout.write = grab as typeof process.stdout.write;
  setLogLevel("warn");
  try {
    await fn();
  } finally {
    process.stderr.write = err;
    process.stdout.write = out;
    setLogLevel("error");
  }
  return lines.join("");
}

async function rpcError(): Promise<Error> {
  const client = createPublicClient({ transport: http(RPC_URL, { retryCount: 0 }) });
  return client.getBlockNumber().then(
    () => {
      throw new Error("the RPC call was expected to fail");
    },
    (e: Error) => e,
  );
}

describe("RPC URL redaction", () => {
  test("viem's error names the URL; the log line shows only its host", async () => {
    const e = await rpcError();
    expect(e.message).toContain(SECRET); // what would leak without redaction
    const out = await captureLogs(async () => log.error("payment facilitator unavailable", { error: e, reason: `settle: ${e.message}` }));
    expect(out).toContain("payment facilitator unavailable");
    expect(out).toContain("127.0.0.1:9/[redacted]");
    expect(out).not.toContain(SECRET);
    expect(out).not.toContain("/v2/");
  });

  test("a payment check opened with that error keeps a redacted reason, in Postgres and in its log line", async () => {
    const e = await rpcError();
    const asset = gw.services.config.payments.chain.assets[0] ?? { address: "0x0000000000000000000000000000000000000001" };
    const payer = "0x" + "ab".repeat(20);
    const nonce = ("0x" + Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("hex")) as `0x${string}`;
    const payment = {
      kind: "eip3009",
      payer,
      inner: {
        signature: "0x",
        authorization: { from: payer, to: payer, value: "1000000", validAfter: "0", validBefore: "9999999999", nonce },
      },
      requirement: { asset: { address: asset.address }, v2: { payTo: "0x" + "cd".repeat(20) }, atomic: 1_000_000n },
    } as unknown as MatchedPayment;
    const out = await captureLogs(() =>
      gw.services.topup.recovery.open(payment, 1_000_000, `settle: RPC_URL unreachable: ${e.message}`, undefined),
    );
    const [row] = await gw.services.sql<{ reason: string }[]>`SELECT reason FROM payment_checks WHERE nonce = ${nonce}`;
    expect(row!.reason).toStartWith("settle: RPC_URL unreachable:");
    expect(row!.reason).toContain("127.0.0.1:9/[redacted]");
    expect(row!.reason).not.toContain(SECRET);
    expect(out).toContain("opened a check");
    expect(out).not.toContain(SECRET);
  });
});

describe("provider keys", () => {
  test("every provider's key format is masked in free text; words that merely contain sk- are not", () => {
    const keys = [
      `sk-${"0f".repeat(32)}`,
      "sk-proj-AbC123xyz_DEF456-ghi789JKL0mnoPQRstuVWxyz01234567",
      "sk-ant-api03-AbCdEf0123456789_GhIjKlMnOpQrStUvWxYz-0123456789abcdefAA",
      "sk-or-v1-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
      "sk_live_51HqLyjWDarjtT1zdp7dcXYZ",
      "gsk_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefGHIJ",
      "xai-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefGHIJ",
      "AIzaSyA-0123456789abcdefghijklmnopqrstu",
    ];
    for (const key of keys) {
      const text = `Incorrect API key provided: ${key}. You can find your API key at the dashboard.`;
      const shown = redactText(text);
      expect(shown).not.toContain(key.slice(8, 20));
      expect(shown).toContain("[redacted]");
    }
    expect(redactText("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc")).toBe("Authorization: Bearer [redacted]");
    for (const plain of ["task-manager-service", "disk-space-low", "risk-assessment-2026"]) expect(redactText(plain)).toBe(plain);
  });

  test("a provider that echoes the key it was sent: the key, whatever its format, never reaches the log", async () => {
    const key = "zz9-PlainProviderToken-4f1c2e7a9b"; // no pattern knows it: only the exact key's mask hides it
    const wrongKey = await startGateway({ STANDIN_KEY: key });
    try {
      const { key: apiKey } = await wrongKey.newWallet(1);
      let status = 0;
      const out = await captureLogs(async () => {
        const res = await wrongKey.call(
          "POST",
          "/v1/chat/completions",
          { model: "standin/echo", messages: [{ role: "user", content: "hi" }] },
          { authorization: `Bearer ${apiKey}` },
        );
        status = res.status;
        expect(JSON.stringify(res.body)).not.toContain(key);
      });
      expect(status).toBe(401);
      expect(out).toContain("upstream failure");
      expect(out).toContain("Incorrect API key provided: [redacted]");
      expect(out).not.toContain(key);
      expect(out).not.toContain("PlainProviderToken");
    } finally {
      await wrongKey.close();
    }
  }, 60_000);
});
