/**
 * The Docker image without Docker: the build stage's `bun build --compile` run over exactly the files the
 * Dockerfile copies (the lockfile's packages standing in for its `bun install`), the binary it makes answering as
 * the image's entrypoint does, and docker-compose.yml's gateway environment a configuration the gateway accepts.
 * (test/dashboard.binary.happy.test.ts starts the compiled binary and serves from it.)
 */
import { afterAll, expect, test } from "bun:test";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { loadConfig } from "../src/config.ts";
import { expandEnvRefs } from "../src/providers/envRefs.ts";

const ROOT = resolve(import.meta.dir, "..");
const dir = mkdtempSync(join(tmpdir(), "gw-docker-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The Dockerfile's instructions (continuation lines joined), by stage. */
function stages(): { from: string; steps: string[] }[] {
  const text = readFileSync(join(ROOT, "Dockerfile"), "utf8").replace(/\\\n/g, " ");
  const out: { from: string; steps: string[] }[] = [];
  for (const line of text.split("\n").map((l) => l.trim())) {
    if (!line || line.startsWith("#")) continue;
    if (line.startsWith("FROM ")) out.push({ from: line, steps: [] });
    else out.at(-1)!.steps.push(line);
  }
  return out;
}

test("the build stage compiles the gateway from what it copies, and the binary answers as the entrypoint", () => {
  const [build, runtime] = stages();
  expect(build!.from).toMatch(/ AS build$/);
  const src = join(dir, "src-tree");
  mkdirSync(src);
  for (const step of build!.steps.filter((s) => s.startsWith("COPY "))) {
    const parts = step.split(/\s+/).slice(1);
    expect(parts[0]!.startsWith("--")).toBe(false);
    for (const path of parts.slice(0, -1)) cpSync(join(ROOT, path), join(src, path), { recursive: true });
  }
  // `RUN bun install --frozen-lockfile` gives the lockfile's packages: the checkout's, installed from the same lockfile.
  expect(build!.steps).toContain("RUN bun install --frozen-lockfile");
  symlinkSync(join(ROOT, "node_modules"), join(src, "node_modules"));
  const compile = build!.steps.find((s) => s.startsWith("RUN bun build "))!;
  const out = compile.match(/--outfile (\S+)/)![1]!;
  const binary = join(dir, "gateway");
  const args = compile.slice("RUN ".length).replace(out, binary).split(/\s+/);
  const made = Bun.spawnSync(args, { cwd: src, stdout: "pipe", stderr: "pipe" });
  expect(made.stderr.toString()).not.toContain("error");
  expect(made.exitCode).toBe(0);

  // The runtime stage runs that binary as `gateway serve`.
  expect(runtime!.steps).toContain(`COPY --from=build ${out} /usr/local/bin/gateway`);
  expect(runtime!.steps).toContain('ENTRYPOINT ["gateway"]');
  expect(runtime!.steps).toContain('CMD ["serve"]');
  const help = Bun.spawnSync([binary, "serve", "--help"], { cwd: dir, env: { PATH: process.env.PATH ?? "" }, stdout: "pipe" });
  expect(help.exitCode).toBe(0);
  expect(help.stdout.toString()).toContain("PORT");
}, 120_000);

test("docker-compose.yml: the gateway built from this Dockerfile, on its Redis and Postgres, with a valid configuration", () => {
  const compose = Bun.YAML.parse(readFileSync(join(ROOT, "docker-compose.yml"), "utf8")) as {
    services: Record<string, { build?: string; command?: string[]; environment?: Record<string, string>; ports?: string[] }>;
  };
  const { gateway, redis, postgres } = compose.services;
  expect(gateway!.build).toBe(".");
  // The ledger refuses a Redis that can evict keys.
  expect(redis!.command!.join(" ")).toContain("--maxmemory-policy noeviction");
  expect(postgres).toBeDefined();

  // What compose hands the container with nothing set in the shell: every ${VAR:-default} at its default.
  const env = Object.fromEntries(Object.entries(gateway!.environment!).map(([k, v]) => [k, expandEnvRefs(String(v), {})]));
  const config = loadConfig(env);
  expect(config).toMatchObject({ port: 8080, redisUrl: "redis://redis:6379", siweDomain: "localhost:8080" });
  expect(new URL(config.databaseUrl!).host).toBe("postgres:5432");
  expect(gateway!.ports!.map((p) => expandEnvRefs(p, { PORT: "9090" }))).toEqual(["9090:9090"]);
  expect(
    loadConfig(Object.fromEntries(Object.entries(gateway!.environment!).map(([k, v]) => [k, expandEnvRefs(String(v), { PORT: "9090" })])))
      .port,
  ).toBe(9090);
});
