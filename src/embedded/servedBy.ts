/**
 * Which gateway serves a data directory, and which serve the directories next to it: an admin command run from
 * the repository root reads ./data while scripts/dev.sh serves data/dev, and would otherwise answer from the wrong
 * ledger without a word. A data directory is served while its embedded redis-server's owner (redis/redis.owner)
 * is a live process.
 */
import { existsSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { alive, readOwner } from "./redis.ts";

/** The live gateway process serving `dataDir` from its embedded redis-server, if any. */
export function servingPid(dataDir: string): number | undefined {
  const pid = readOwner(join(dataDir, "redis", "redis.owner"));
  return alive(pid) ? pid : undefined;
}

/** Directories in which an operator's gateway is likely to run instead: the children, the parent and the siblings. */
function neighbours(dataDir: string): string[] {
  const subdirs = (dir: string) => {
    try {
      return readdirSync(dir, { withFileTypes: true })
        .filter((d) => d.isDirectory())
        .map((d) => join(dir, d.name));
    } catch {
      return [];
    }
  };
  const parent = dirname(dataDir);
  return [...subdirs(dataDir), parent, ...subdirs(parent)].filter((d) => d !== dataDir && existsSync(join(d, "redis", "redis.owner")));
}

/** Live gateways serving a directory next to `dataDir` (not `dataDir` itself), with their process ids. */
export function servedNeighbours(dataDir: string): { dataDir: string; pid: number }[] {
  return neighbours(dataDir).flatMap((d) => {
    const pid = servingPid(d);
    return pid === undefined ? [] : [{ dataDir: d, pid }];
  });
}
