/**
 * The provider stand-in as its own process, so it never shares an event loop with the load generator.
 * Usage: bun bench/standin.ts <delayMs>   → prints "READY <port>" once listening on 127.0.0.1.
 */
import { startStandin } from "../test/helpers/openaiStandin.ts";

const delayMs = Number(process.argv[2] ?? process.env.STANDIN_DELAY_MS ?? 0);
if (!Number.isFinite(delayMs) || delayMs < 0) {
  console.error(`bad delay "${process.argv[2]}"`);
  process.exit(2);
}
const standin = startStandin({ delayMs, record: false });
console.log(`READY ${standin.port}`);

const stop = () => {
  standin.stop();
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
