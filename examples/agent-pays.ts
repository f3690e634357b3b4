// An agent pays from the call it makes (x402 v2): the OpenAI SDK with @x402/fetch as its fetch. With `bash
// scripts/dev.sh` running (it prints PORT, PRIVATE_KEY and USDC) and KEY from `bun scripts/signin.ts`:
//   bun examples/agent-pays.ts     # a key whose wallet is short pays 1 USD of credit, then gets its answer
import OpenAI from "openai";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { wrapFetchWithPayment, x402Client } from "@x402/fetch";
import { privateKeyToAccount } from "viem/accounts";

const { PORT = "8080", PRIVATE_KEY, USDC, KEY } = process.env;
const client = new x402Client();
registerExactEvmScheme(client, { signer: privateKeyToAccount(PRIVATE_KEY as `0x${string}`) });
// Allow the dev chain's USDC by its address (an empty list allows nothing: the SDK then says only "Connection error.").
client.setSpendControls({
  maxAmountPerPayment: "$5",
  allowedAssets: [{ network: "eip155:84532", asset: USDC!, maxAmountPerPayment: "5000000" }],
});
const openai = new OpenAI({ baseURL: `http://localhost:${PORT}/v1`, apiKey: KEY!, fetch: wrapFetchWithPayment(fetch, client) });
const answer = await openai.chat.completions.create({ model: "echo/echo", messages: [{ role: "user", content: "Hello, gateway" }] });
console.log(answer.choices[0]!.message.content);
