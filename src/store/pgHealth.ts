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
 */
export class PgHealth {
  private downSince: number | null = null;
  private timer?: ReturnType<typeof setTimeout>;
  private stopped = false;

  constructor(private readonly raw: Sql) {}

  /** True from a request's Postgres outage until a probe gets an answer. */
  get down(): boolean {
    return this.downSince !== null;
  }

  /** A request failed because Postgres is unreachable: refuse at once until the probe sees it back. */
  markDown(error: unknown): void {
    if (this.downSince !== null || this.stopped) return;
    this.downSince = Date.now();
    log.error("Postgres unreachable; Postgres-backed requests answer 503 until it returns", { error });
    this.probeLater();
  }

  private probeLater(): void {
    this.timer = setTimeout(() => {
      this.raw`SELECT 1`.then(
        () => {
          log.info("Postgres reachable again", { down_ms: Date.now() - (this.downSince ?? Date.now()) });
          this.downSince = null;
        },
        () => {
          if (!this.stopped) this.probeLater();
        },
      );
    }, PROBE_MS);
  }

  /**
   * The client services use: the same postgres.js instance, except that a query (a tagged-template call) is
   * refused with DependencyDown while Postgres is known down. Helpers (`sql(rows)`), `begin`, `unsafe` and `end`
   * pass through untouched.
   */
  guard(): Sql {
    return new Proxy(this.raw, {
      apply: (target, thisArg, args: unknown[]) => {
        if (this.downSince !== null && isTemplateCall(args)) return Promise.reject(new DependencyDown("postgres", "Postgres is unreachable"));
        return Reflect.apply(target, thisArg, args);
      },
    });
  }

  /** Stops probing (shutdown). */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}
