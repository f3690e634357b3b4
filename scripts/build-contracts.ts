/**
 * Compiles contracts/*.sol with solc-js (the compiler ships as wasm inside the npm package: no download) into
 * contracts/out/<Name>.json = {abi, bytecode}. Run by scripts/setup.sh, so `scripts/test.sh` and the dev chain
 * always use what the source says. Skips the work when every artifact is newer than its source.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import solc from "solc";

const root = resolve(import.meta.dir, "..");
const srcDir = join(root, "contracts");
const outDir = join(srcDir, "out");
mkdirSync(outDir, { recursive: true });

const files = readdirSync(srcDir).filter((f) => f.endsWith(".sol"));
const stale = files.filter((f) => {
  const out = join(outDir, f.replace(/\.sol$/, ".json"));
  return !existsSync(out) || statSync(out).mtimeMs < statSync(join(srcDir, f)).mtimeMs;
});
if (stale.length === 0 && !process.argv.includes("--force")) process.exit(0);

const input = {
  language: "Solidity",
  sources: Object.fromEntries(files.map((f) => [f, { content: readFileSync(join(srcDir, f), "utf8") }])),
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: "cancun",
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
  },
};
const output = JSON.parse(solc.compile(JSON.stringify(input))) as {
  errors?: { severity: string; formattedMessage: string }[];
  contracts: Record<string, Record<string, { abi: unknown[]; evm: { bytecode: { object: string } } }>>;
};
const errors = (output.errors ?? []).filter((e) => e.severity === "error");
for (const e of output.errors ?? []) console.error(e.formattedMessage);
if (errors.length > 0) process.exit(1);

for (const [file, contracts] of Object.entries(output.contracts)) {
  for (const [name, c] of Object.entries(contracts)) {
    const artifact = {
      contractName: name,
      source: `contracts/${file}`,
      compiler: solc.version(),
      abi: c.abi,
      bytecode: `0x${c.evm.bytecode.object}`,
    };
    writeFileSync(join(outDir, `${name}.json`), JSON.stringify(artifact, null, 1) + "\n");
    console.error(`contracts: ${name} compiled with solc ${solc.version()}`);
  }
}
