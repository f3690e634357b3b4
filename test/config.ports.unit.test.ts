/**
 * Ports from one variable: the catalog file's `baseUrl`s take environment references (`${ECHO_PORT:-8081}`), so the
 * shipped local catalog follows the echo model's port; a reference to an unset variable without a default stops
 * start-up with one configuration line naming it.
 */
import { describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { ConfigError, loadConfig } from "../src/config.ts";
import { EnvRefError, expandEnvRefs } from "../src/providers/envRefs.ts";

const LOCAL_CATALOG = resolve(import.meta.dir, "../config/models.local.json");
const dir = mkdtempSync(join(tmpdir(), "gw-ports-"));
function catalogWith(baseUrl: string): string {
  const file = join(dir, `${Math.random().toString(36).slice(2)}.json`);
  const model = {
    id: "local/m",
    provider: "local",
    upstreamModel: "m",
    name: "M",
    contextLength: 1000,
    maxOutputTokens: 100,
    promptPricePer1MTokens: 1,
    completionPricePer1M: 2,
    costPromptPer1M: 0,
    costCompletionPer1M: 0,
  };
  writeFileSync(file, JSON.stringify({ providers: { local: { type: "openai", baseUrl } }, models: [model] }));
  return file;
}
const baseUrlOf = (env: Record<string, string>) => loadConfig(env).catalog.models.get("echo/echo")!.provider.baseUrl;

describe("the shipped local catalog follows ECHO_PORT", () => {
  test("unset or empty: the default 8081; set: that port", () => {
    expect(baseUrlOf({ MODELS_FILE: LOCAL_CATALOG })).toBe("http://127.0.0.1:8081/v1");
    expect(baseUrlOf({ MODELS_FILE: LOCAL_CATALOG, ECHO_PORT: "" })).toBe("http://127.0.0.1:8081/v1");
    expect(baseUrlOf({ MODELS_FILE: LOCAL_CATALOG, ECHO_PORT: "9091" })).toBe("http://127.0.0.1:9091/v1");
    // Only the echo provider refers to a variable; Ollama stays where it is.
    const c = loadConfig({ MODELS_FILE: LOCAL_CATALOG, ECHO_PORT: "9091" });
    expect(c.catalog.models.get("ollama/llama3.2")!.provider.baseUrl).toBe("http://127.0.0.1:11434/v1");
  });
});

describe("environment references in a baseUrl", () => {
  test("${NAME} and ${NAME:-default}, several in one URL, a lone $ kept", () => {
    const env = { HOST_A: "10.0.0.7", PORT_A: "7000" };
    expect(expandEnvRefs("http://${HOST_A}:${PORT_A}/v1", env)).toBe("http://10.0.0.7:7000/v1");
    expect(expandEnvRefs("http://${HOST_B:-localhost}:${PORT_B:-1234}/v1", env)).toBe("http://localhost:1234/v1");
    expect(expandEnvRefs("http://h/$x/v1", env)).toBe("http://h/$x/v1");
    expect(expandEnvRefs("http://h:${PORT_A:-}/v1", {})).toBe("http://h:/v1");
    // A variable set to "" is set: ${NAME} keeps it empty (the URL check then decides), ${NAME:-d} takes the default.
    expect(expandEnvRefs("a${E}b", { E: "" })).toBe("ab");
  });

  test("malformed references are refused, not passed on", () => {
    expect(() => expandEnvRefs("http://h:${PORT/v1", {})).toThrow(EnvRefError);
    expect(() => expandEnvRefs("http://h:${9PORT}/v1", {})).toThrow('has "${9PORT}", which is not a variable reference');
    expect(() => expandEnvRefs("http://h:${}/v1", {})).toThrow(EnvRefError);
  });

  test("loadConfig resolves them from its environment", () => {
    const file = catalogWith("http://127.0.0.1:${LOCAL_PORT:-8000}/v1/");
    expect(loadConfig({ MODELS_FILE: file }).catalog.models.get("local/m")!.provider.baseUrl).toBe("http://127.0.0.1:8000/v1");
    expect(loadConfig({ MODELS_FILE: file, LOCAL_PORT: "8100" }).catalog.models.get("local/m")!.provider.baseUrl).toBe(
      "http://127.0.0.1:8100/v1",
    );
  });

  test("an unset variable without a default: one configuration error naming the file, the field and the variable", () => {
    const file = catalogWith("http://127.0.0.1:${LOCAL_PORT}/v1");
    let error: unknown;
    try {
      loadConfig({ MODELS_FILE: file });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).message).toBe(
      `MODELS_FILE: ${file}: providers.local.baseUrl needs LOCAL_PORT, which is not set (set it, or give a default: \${LOCAL_PORT:-…})`,
    );
  });

  test("a reference that resolves to no URL is the catalog's URL error", () => {
    const file = catalogWith("${LOCAL_URL}");
    expect(() => loadConfig({ MODELS_FILE: file, LOCAL_URL: "not a url" })).toThrow("providers.local.baseUrl is not a URL");
  });
});
