import { log } from "../log.ts";
import { DependencyDown } from "../outage.ts";
import type { Sql } from "./db.ts";

// While Postgres is down it is asked this often whether it is back: a request answers normally within about this
// long after it returns.
const PROBE_MS = 250;

function isTemplateCall(args: unknown[]): boolean {
  return Array.isArray(args[0]) && "raw" in (args[0] as object);
}

/**
 * Whether Postgres answers, so Postgres-backed requests fail at once (503) while it is down instead of each one
 * waiting on a connect (up to connect_timeout when the host does not even refuse). A request that failed on a
 * Postgres outage marks it down (the app's error handler); from then on the guarded client refuses queries at once
 * and a probe (`SELECT 1` every 250 ms) marks it up again.
 *
 * The probe has a client of its own (`openProbe`: one connection, a short connect timeout). On the pool, a probe
 * sent while the host did not answer waited out the pool's connect timeout (5 s) even when Postgres came back a
 * moment later, and held a pool connection meanwhile.
 */
export class PgHealth {
  private downSince: number | null = null;
  private timer?: ReturnType<typeof setTimeout>;
  private stopped = false;
  private probe?: Sql;
  /** performance.now() when a probe last saw Postgres back. */
  private upAt = -Infinity;

  constructor(
    private readonly raw: Sql,
    private readonly openProbe: () => Sql = () => raw,
  ) {}

  /** True from a request's Postgres outage until a probe gets an answer. */
  get down(): boolean {
    return this.downSince !== null;
  }

  /**
   * A request (started at `startedAt`, performance.now()) failed because Postgres is unreachable: refuse at once
   * until the probe sees it back. A request sent before the probe last saw Postgres back failed on the outage that
   * is over (its connect waited through it, up to connect_timeout): that is no new outage.
   */
  markDown(error: unknown, startedAt = performance.now()): void {
    if (this.downSince !== null || this.stopped || startedAt < this.upAt) return;
    this.downSince = Date.now();
    log.error("Postgres unreachable; Postgres-backed requests answer 503 until it returns", { error });
    this.probeLater();
  }

  private probeLater(): void {
    this.timer = setTimeout(() => {
      const probe = (this.probe ??= this.openProbe());
      probe`SELECT 1`.then(
        () => {
          log.info("Postgres reachable again", { down_ms: Date.now() - (this.downSince ?? Date.now()) });
          this.downSince = null;
          this.upAt = performance.now();
          this.closeProbe();
        },
        () => {
          if (!this.stopped) this.probeLater();
        },
      );
    }, PROBE_MS);
  }

  private closeProbe(): void {
    if (this.probe && this.probe !== this.raw) void this.probe.end({ timeout: 0 }).catch(() => {});
    this.probe = undefined;
  }

  /**
   * The client services use: the same postgres.js instance, except that a query (a tagged-template call, `unsafe`,
   * `begin`) is refused with DependencyDown while Postgres is known down. Helpers (`sql(rows)`) and `end` pass
   * through untouched. The flusher's inserts (`unsafe`) are refused too: sent on, each waited on a connect that a
   * host that does not answer holds for the connect timeout, so the backlog's drain began that long after the return.
   */
  guard(): Sql {
    const refused = () => Promise.reject(new DependencyDown("postgres", "Postgres is unreachable"));
    return new Proxy(this.raw, {
      apply: (target, thisArg, args: unknown[]) => {
        if (this.downSince !== null && isTemplateCall(args)) return refused();
        return Reflect.apply(target, thisArg, args);
      },
      get: (target, prop, receiver) => {
        const value = Reflect.get(target, prop, receiver);
        if ((prop !== "unsafe" && prop !== "begin") || typeof value !== "function") return value;
        return (...args: unknown[]) => (this.downSince !== null ? refused() : Reflect.apply(value, target, args));
      },
    });
  }

  /** Stops probing (shutdown). */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.closeProbe();
  }
}
