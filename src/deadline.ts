/**
 * The one deadline race in the gateway (Redis and Postgres calls, settles, health probes, the facilitator): a slow
 * dependency must cost a request a known time, never an unbounded wait.
 *
 * Deadlines share one clock: a timer that ticks every TICK_MS while any deadline is pending, instead of a timer, an
 * AbortController and a Promise.race per call (a request's reserve, body read and settle each had all three: a
 * share of its CPU, issue 31). Deadlines of one length are due in the order they were set, so each length keeps a
 * queue and a tick looks only at the queues' heads. A deadline fires at most TICK_MS after it is due, never before
 * (a shared `deadlineSignal`, at most SLOT_MS + TICK_MS).
 */

const TICK_MS = 20;

interface Pending {
  at: number;
  /** Set once the work settled or the deadline fired: the tick then skips it. */
  done: boolean;
  fire(): void;
}

/**
 * Pending deadlines of one length, in due order. `head` is the first not yet taken off; `settled` counts those
 * behind it whose work ended first: once they are most of a long queue it is compacted (a long deadline, a body
 * read's, would otherwise keep every request's entry until it is due).
 */
interface Queue {
  items: Pending[];
  head: number;
  settled: number;
}
const queues = new Map<number, Queue>();
let ticking: ReturnType<typeof setInterval> | undefined;

function schedule(ms: number, p: Pending): Queue {
  let q = queues.get(ms);
  if (!q) queues.set(ms, (q = { items: [], head: 0, settled: 0 }));
  q.items.push(p);
  // unref: a pending deadline alone never keeps a process alive (its work, a socket or a timer, does if it must).
  ticking ??= setInterval(tick, TICK_MS).unref();
  return q;
}

/** The work ended before its deadline. */
function settle(q: Queue, p: Pending): void {
  p.done = true;
  if (++q.settled > 1024 && q.settled * 2 > q.items.length - q.head) {
    q.items = q.items.slice(q.head).filter((x) => !x.done);
    q.head = 0;
    q.settled = 0;
  }
}

function tick(): void {
  const now = performance.now();
  for (const [ms, q] of queues) {
    const { items } = q;
    let i = q.head;
    for (; i < items.length; i++) {
      const p = items[i]!;
      if (p.done) continue;
      if (p.at > now) break;
      p.done = true;
      p.fire();
    }
    if (i >= items.length) queues.delete(ms);
    else if (i > 1024 && i * 2 > items.length) (items.splice(0, i), (q.head = 0), (q.settled = 0));
    else q.head = i;
  }
  if (queues.size === 0) {
    clearInterval(ticking);
    ticking = undefined;
  }
}

// Deadline signals of one length, shared by the calls started within the same slot of this many ms.
const SLOT_MS = TICK_MS;
const slots = new Map<number, { until: number; signal: AbortSignal }>();

/**
 * A signal that aborts `ms` after now, give or take: never before, at most SLOT_MS + TICK_MS after. The calls of one
 * length started within one slot share its AbortController, which aborts once the slot's last possible start is
 * `ms` old: a provider call passes it to fetch instead of a controller of its own (a per-request AbortController
 * with the Promise that races it cost ~10 µs of CPU per request: its native objects and their collection, issue 31).
 * Aborting a signal whose fetch has finished does nothing, and a finished fetch keeps no listener on it.
 */
export function deadlineSignal(ms: number): AbortSignal {
  const now = performance.now();
  const slot = slots.get(ms);
  if (slot !== undefined && now < slot.until) return slot.signal;
  const ctrl = new AbortController();
  const until = now + SLOT_MS;
  slots.set(ms, { until, signal: ctrl.signal });
  // Queued with the deadlines of length ms + SLOT_MS, in whose due order it is.
  schedule(ms + SLOT_MS, {
    at: until + ms,
    done: false,
    fire() {
      ctrl.abort();
    },
  });
  return ctrl.signal;
}

/**
 * A deadline without a promise: `fire` runs once `ms` have passed, unless the returned `end` is called first. `end`
 * says whether it came first (true: the deadline will not fire; false: it had fired). For work that reports its
 * outcome by callback (a settle's attempt, billing/holds.ts): a Pending on the shared clock, nothing else.
 */
export function deadline(ms: number, fire: () => void): () => boolean {
  const p: Pending = { at: performance.now() + ms, done: false, fire };
  const q = schedule(ms, p);
  return () => {
    if (p.done) return false;
    settle(q, p);
    return true;
  };
}

// The signal work gets when it does not take one (it never fires).
const NEVER = new AbortController().signal;

/**
 * Settles as `work` does, unless `ms` pass first: then it rejects with `late()` and fires the signal. Work that
 * listens to the signal (a fetch) stops; other work runs on, its outcome the caller's to handle. Only work that
 * declares the signal parameter gets an AbortController of its own.
 */
export function withDeadline<T>(ms: number, work: (signal: AbortSignal) => Promise<T>, late: () => Error): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const ctrl = work.length > 0 ? new AbortController() : undefined;
    const p: Pending = {
      at: performance.now() + ms,
      done: false,
      fire() {
        ctrl?.abort();
        reject(late());
      },
    };
    const q = schedule(ms, p);
    let running: Promise<T>;
    try {
      running = work(ctrl?.signal ?? NEVER);
    } catch (e) {
      settle(q, p);
      reject(e);
      return;
    }
    running.then(
      (v) => {
        if (p.done) return;
        settle(q, p);
        resolve(v);
      },
      (e: unknown) => {
        if (p.done) return;
        settle(q, p);
        reject(e);
      },
    );
  });
}
