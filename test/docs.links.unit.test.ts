/**
 * The docs hold together: every relative link in README.md, docs/*.md and bench/README.md reaches a file that
 * exists and, when it names an anchor in a markdown file, a heading there (GitHub's anchors); and docs/design.md's
 * "Where things are" names only paths that exist, and every folder under src/.
 */
import { expect, test } from "bun:test";
import { Glob } from "bun";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { dirname, join, normalize, relative } from "node:path";

const ROOT = join(import.meta.dir, "..");
const pages = ["README.md", "bench/README.md", ...new Glob("docs/*.md").scanSync(ROOT)].sort();

/** Markdown text outside fenced code blocks. */
function prose(text: string): string {
  return text.replace(/^```[\s\S]*?^```/gm, "");
}

/** GitHub's anchor for each heading: lower case, punctuation dropped, spaces to hyphens, repeats numbered. */
function anchorsOf(text: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const m of prose(text).matchAll(/^#{1,6} +(.+?) *#*$/gm)) {
    const slug = m[1]!
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    anchors.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return anchors;
}

/** The relative links of a page: [text](target), external and mail links left out. */
function linksOf(text: string): string[] {
  return [...prose(text).matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!).filter((t) => !/^[a-z]+:/i.test(t));
}

test.each(pages)("every relative link in %s resolves", (page) => {
  const broken: string[] = [];
  for (const link of linksOf(readFileSync(join(ROOT, page), "utf8"))) {
    const [path, anchor] = link.split("#") as [string, string | undefined];
    const target = path === "" ? join(ROOT, page) : normalize(join(ROOT, dirname(page), path));
    if (!existsSync(target)) {
      broken.push(`${link} (no file ${relative(ROOT, target)})`);
      continue;
    }
    if (anchor !== undefined && target.endsWith(".md") && !anchorsOf(readFileSync(target, "utf8")).has(anchor))
      broken.push(`${link} (no heading #${anchor} in ${relative(ROOT, target)})`);
  }
  expect(broken).toEqual([]);
});

test("docs/design.md's 'Where things are' names paths that exist, and every folder under src/", () => {
  const design = readFileSync(join(ROOT, "docs/design.md"), "utf8");
  const where = design.slice(design.indexOf("## Where things are"));
  const rows = [...where.matchAll(/^\| (`[^|]+`) \|/gm)].flatMap((m) => [...m[1]!.matchAll(/`([^`]+)`/g)].map((p) => p[1]!));
  expect(rows.length).toBeGreaterThan(20);
  expect(rows.filter((p) => !existsSync(join(ROOT, p)))).toEqual([]);
  const srcFolders = readdirSync(join(ROOT, "src"), { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => `src/${d.name}/`);
  expect(srcFolders.filter((f) => !rows.includes(f))).toEqual([]);
});
