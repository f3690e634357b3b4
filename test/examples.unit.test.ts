/**
 * The docs show the examples as the suite runs them: each file under examples/ appears verbatim, as a whole, in
 * README.md or a guide under docs/ (and its own test runs it: quickstart.sh in quickstart.happy.test.ts).
 */
import { expect, test } from "bun:test";
import { Glob } from "bun";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const ROOT = join(import.meta.dir, "..");
const docs = ["README.md", ...new Glob("docs/*.md").scanSync(ROOT)].map((f) => ({ f, text: readFileSync(join(ROOT, f), "utf8") }));
const examples = [...new Glob("examples/*").scanSync(ROOT)].sort();

test("there are examples", () => {
  expect(examples).toContain("examples/quickstart.sh");
});

test.each(examples)("%s is shown whole in the docs", (example) => {
  const code = readFileSync(join(ROOT, example), "utf8");
  const shownIn = docs.filter((d) => d.text.includes("\n" + code + "```")).map((d) => d.f);
  expect({ example, shownIn: shownIn.length > 0 }).toEqual({ example, shownIn: true });
});
