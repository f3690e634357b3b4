/**
 * The one deadline race in the gateway (Redis and Postgres calls, settles, health probes, the facilitator): a slow
 * dependency must cost a request a known time, never an unbounded wait.
 */

/**
 * Settles as `work` does, unless `ms` pass first: then it rejects with `late()` and fires the signal. Work that
 * listens to the signal (a fetch) stops; other work runs on, its outcome the caller's to handle.
 */
export async function withDeadline<T>(ms: number, work: (signal: AbortSignal) => Promise<T>, late: () => Error): Promise<T> {
  const ctrl = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      ctrl.abort();
      reject(late());
    }, ms);
  });
  try {
    return await Promise.race([work(ctrl.signal), expired]);
  } finally {
    clearTimeout(timer);
  }
}
