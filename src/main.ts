/**
 * The entry (`bun src/main.ts`, the compiled binary, the image): a serving gateway first gives JavaScriptCore its
 * heap hint (heapHint.ts, which re-executes the process once), then the command runs (cli.ts). Nothing else is
 * loaded before that, so the exec costs one start of Bun and no module twice. A process started to make the
 * embedded Postgres's data directory (embedded/postgres.ts) does only that.
 */
import { execWithHeapHint } from "./heapHint.ts";

const initdb = process.env.GATEWAY_PGLITE_INITDB;
if (initdb) {
  await (await import("./embedded/postgres.ts")).runInitdb(initdb);
  process.exit(0);
}
const [command = "serve", ...rest] = process.argv.slice(2);
if (command === "serve" && rest.length === 0) execWithHeapHint();
await import("./cli.ts");
