/** A Redis Cluster to connect to: seed nodes (any of its nodes; the rest is discovered) and the password, if any. */
export interface ClusterTarget {
  cluster: { host: string; port: number }[];
  password?: string;
}

/** Where the ledger lives: one Redis (a URL or a unix socket path) or a Redis Cluster. */
export type RedisTarget = string | ClusterTarget;

export function isCluster(t: RedisTarget): t is ClusterTarget {
  return typeof t !== "string";
}

/** Where a target points, without credentials (for logs and start-up errors). */
export function describeTarget(t: RedisTarget): string {
  if (isCluster(t)) return `the Redis Cluster of ${t.cluster.map((n) => `${n.host}:${n.port}`).join(",")}`;
  try {
    const u = new URL(t);
    return u.host || t;
  } catch {
    return t;
  }
}
