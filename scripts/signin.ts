/**
 * Signs in with Ethereum and creates an API key, building the SIWE message only from GET /v1/auth/siwe.
 * Prints shell lines, so `eval "$(bun scripts/signin.ts)"` sets WALLET and KEY.
 *
 *   bun scripts/signin.ts [gateway URL]        # default $GATEWAY_URL, else http://localhost:$PORT (8080); a new wallet each time
 *   PRIVATE_KEY=0x… bun scripts/signin.ts      # sign with this wallet instead
 */
import type { Hex } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { createSiweMessage } from "viem/siwe";

// The gateway's own PORT, so one `export PORT=…` moves the quick start's every command.
const gateway = (process.argv[2] || process.env.GATEWAY_URL || `http://localhost:${process.env.PORT || 8080}`).replace(/\/+$/, "");
const privateKey = (process.env.PRIVATE_KEY as Hex | undefined) ?? generatePrivateKey();
const account = privateKeyToAccount(privateKey);

const p = await (await fetch(`${gateway}/v1/auth/siwe`)).json();
const message = createSiweMessage({
  domain: p.domain,
  uri: p.uri,
  version: p.version,
  chainId: p.chain_ids[0],
  nonce: p.nonce,
  statement: p.statement ?? "Sign in to the LLM credit gateway",
  issuedAt: new Date(),
  address: account.address,
});
const signature = await account.signMessage({ message });
const res = await fetch(`${gateway}/v1/auth/keys`, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ message, signature, label: "signin.ts" }),
});
const body = await res.json();
if (res.status !== 201) {
  console.error(`sign-in refused: ${res.status} ${body.error}: ${body.message}`);
  process.exit(1);
}
if (!process.env.PRIVATE_KEY) console.error(`# new wallet; its private key (keep it to sign in again): ${privateKey}`);
console.log(`WALLET=${account.address.toLowerCase()}`);
console.log(`KEY=${body.key}`);
