import type { DashboardBundle } from "./bundle.ts";

/**
 * Bun macro: runs the dashboard build when the importing module is transpiled (at `bun build --compile`, and
 * when `bun src/main.ts` or a test loads it), so the page ships inside the binary with no build step to forget.
 */
export function dashboardBundle(): DashboardBundle {
  const run = Bun.spawnSync([process.execPath, `${import.meta.dir}/bundle.ts`], { stdout: "pipe", stderr: "pipe" });
  if (!run.success) throw new Error(`dashboard build failed: ${run.stderr.toString()}`);
  return JSON.parse(run.stdout.toString()) as DashboardBundle;
}
