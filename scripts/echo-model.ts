/**
 * The echo model server alone (src/providers/echoModel.ts): config/models.local.json's "echo" provider. `serve`
 * runs the same server in-process, as `local/echo`, when no provider is configured at all.
 *
 *   bun scripts/echo-model.ts            # http://127.0.0.1:8081/v1   (ECHO_PORT, ECHO_HOST to change)
 *
 * config/models.local.json reads the same ECHO_PORT (`http://127.0.0.1:${ECHO_PORT:-8081}/v1`), and so does
 * scripts/dev.sh, which runs this server itself.
 */
import { startEchoModel } from "../src/providers/echoModel.ts";

export { startEchoModel };

if (import.meta.main) {
  const m = startEchoModel({ port: Number(process.env.ECHO_PORT || 8081), hostname: process.env.ECHO_HOST ?? "127.0.0.1" });
  console.error(`echo model listening on ${m.url} (keyless; answers with the last user message)`);
}
