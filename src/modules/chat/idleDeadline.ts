/**
 * The provider deadline of a stream. It runs only while the gateway waits on the provider (first byte, then each
 * read): a client that reads slowly must not make a working upstream look idle, which would release the hold of a
 * served answer. Its signal also stops the upstream when the stream ends early.
 */
export class IdleDeadline {
  private readonly abort = new AbortController();
  /** One timer per stream: it checks the wait's start when it fires, instead of a timer set and cleared per read. */
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** When the current wait on the provider began; NaN while the gateway is not waiting. */
  private since = Number.NaN;

  constructor(private readonly ms: number) {}

  /** Passed to fetch: aborted at the deadline or by `stop`. */
  get signal(): AbortSignal {
    return this.abort.signal;
  }

  /** The deadline passed (or the upstream was stopped). */
  get passed(): boolean {
    return this.abort.signal.aborted;
  }

  /** Starts waiting on the provider. */
  arm(): void {
    this.since = performance.now();
    this.timer ??= setTimeout(this.check, this.ms);
  }

  /** The provider answered (or nobody waits any more). */
  disarm(): void {
    this.since = Number.NaN;
  }

  /** The stream is over: the timer goes too (a pending one would keep the stream's objects alive until it fires). */
  close(): void {
    this.since = Number.NaN;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** Stops the upstream. */
  stop(): void {
    this.close();
    this.abort.abort();
  }

  private readonly check = (): void => {
    this.timer = undefined;
    if (Number.isNaN(this.since)) return; // not waiting: the next arm sets the timer again
    const left = this.since + this.ms - performance.now();
    if (left <= 0) this.abort.abort();
    else this.timer = setTimeout(this.check, left);
  };
}
