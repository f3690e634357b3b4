/**
 * The provider stand-in as its own process, so it never shares an event loop with the load generator.
 * Usage: bun bench/standin.ts <delayMs>   → prints "READY <port>" once listening on 127.0.0.1.
 *        bun bench/standin.ts anthropic   → the Anthropic-format stand-in (no delay), for the front doors' figures.
 */
import { startAnthropicStandin } from "../test/helpers/anthropicStandin.ts";
import { startStandin } from "../test/helpers/openaiStandin.ts";

let stop: () => void;
if (process.argv[2] === "anthropic") {
  const standin = startAnthropicStandin({ record: false });
  console.log(`READY ${new URL(standin.url).port}`);
  stop = standin.stop;
} else {
  const delayMs = Number(process.argv[2] ?? process.env.STANDIN_DELAY_MS ?? 0);
  if (!Number.isFinite(delayMs) || delayMs < 0) {
    console.error(`bad delay "${process.argv[2]}"`);
    process.exit(2);
  }
  const standin = startStandin({ delayMs, record: false });
  console.log(`READY ${standin.port}`);
  stop = standin.stop;
}

for (const sig of ["SIGTERM", "SIGINT"] as const)
  process.on(sig, () => {
    stop();
    process.exit(0);
  });
