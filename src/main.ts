/**
 * The entry (`bun src/main.ts`, the compiled binary, the image): a serving gateway first gives JavaScriptCore its
 * heap hint (heapHint.ts, which re-executes the process once), then the command runs (cli.ts). Nothing else is
 * loaded before that, so the exec costs one start of Bun and no module twice.
 */
import { execWithHeapHint } from "./heapHint.ts";

const [command = "serve", ...rest] = process.argv.slice(2);
if (command === "serve" && rest.length === 0) execWithHeapHint();
await import("./cli.ts");
