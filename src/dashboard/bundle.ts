/**
 * Builds the dashboard with Bun's bundler: page/main.ts (minified, tree-shaken viem) and the HTML with its CSS
 * inlined. Run as a program it prints the result as JSON (the build macro runs it so, because Bun.build cannot
 * run inside a macro); `--report` prints the sizes instead.
 */
import { gzipSync } from "bun";
import { join } from "node:path";

/** The built page: the HTML (config and script placeholders left in) and the one script. */
export interface DashboardBundle {
  html: string;
  js: string;
  /** Content hash of the script: its URL, so browsers may cache it for good. */
  hash: string;
}

const dir = join(import.meta.dir, "page");

export async function buildDashboard(): Promise<DashboardBundle> {
  const result = await Bun.build({
    entrypoints: [join(dir, "main.ts")],
    target: "browser",
    format: "esm",
    minify: true,
    define: { "process.env.NODE_ENV": '"production"' },
  });
  if (!result.success) throw new AggregateError(result.logs, "dashboard build failed");
  const js = await result.outputs[0]!.text();
  const css = (await Bun.file(join(dir, "style.css")).text()).replace(/\s*\n\s*/g, "");
  const html = (await Bun.file(join(dir, "index.html")).text()).replace("/*STYLE*/", css);
  const hash = new Bun.CryptoHasher("sha256").update(js).digest("hex").slice(0, 16);
  return { html, js, hash };
}

if (import.meta.main) {
  const b = await buildDashboard();
  if (process.argv.includes("--report")) {
    const kb = (s: string) => `${(Buffer.byteLength(s) / 1024).toFixed(1)} KB`;
    console.log(`dashboard JS   ${kb(b.js)} minified, ${(gzipSync(b.js).length / 1024).toFixed(1)} KB gzip`);
    console.log(`dashboard HTML ${kb(b.html)} (CSS inlined)`);
  } else {
    process.stdout.write(JSON.stringify(b));
  }
}
