/**
 * withDeadline on the shared clock (src/deadline.ts): the work's outcome when it ends first, the late error (and
 * the aborted signal) when the deadline passes first, never before it is due, and many deadlines at once.
 */
import { expect, test } from "bun:test";
import { deadline, deadlineSignal, withDeadline } from "../src/deadline.ts";

const late = () => new Error("late");

test("work that ends first settles the call with its value or its error", async () => {
  expect(await withDeadline(1_000, async () => 7, late)).toBe(7);
  await expect(withDeadline(1_000, () => Promise.reject(new Error("own")), late)).rejects.toThrow("own");
  await expect(
    withDeadline(
      1_000,
      () => {
        throw new Error("sync");
      },
      late,
    ),
  ).rejects.toThrow("sync");
});

test("a deadline fires late() and aborts the signal once due, not before", async () => {
  let signal: AbortSignal | undefined;
  const started = performance.now();
  const err = await withDeadline(
    60,
    (s) => {
      signal = s;
      return new Promise<never>(() => {});
    },
    late,
  ).catch((e: Error) => e);
  expect((err as Error).message).toBe("late");
  expect(performance.now() - started).toBeGreaterThanOrEqual(59);
  expect(signal!.aborted).toBe(true);
  // Work that outlives its deadline does not change the outcome.
  let finish!: (v: number) => void;
  const p = withDeadline(30, () => new Promise<number>((r) => (finish = r)), late);
  await expect(p).rejects.toThrow("late");
  finish(1);
});

test("thousands of deadlines of mixed lengths: each call gets its own outcome", async () => {
  const calls = Array.from({ length: 5_000 }, (_, i) =>
    withDeadline(
      i % 3 === 0 ? 40 : 5_000 + (i % 2),
      () => (i % 3 === 0 ? new Promise<number>(() => {}) : Promise.resolve(i)),
      () => new Error(`late ${i}`),
    ).catch((e: Error) => e.message),
  );
  const out = await Promise.race([Promise.all(calls), Bun.sleep(10_000).then(() => "stuck")]);
  expect(out).not.toBe("stuck");
  const results = out as (number | string)[];
  results.forEach((r, i) => {
    expect(r).toBe(i % 3 === 0 ? `late ${i}` : i);
  });
});

test("deadlineSignal: shared by the calls of one slot, aborted once every one of them is due, never before", async () => {
  const started = performance.now();
  // When a signal aborted, counted from `started` (its listener added as it is made: a slow machine may fire it early in the test).
  const abortedAt = (s: AbortSignal) =>
    new Promise<number>((resolve) => s.addEventListener("abort", () => resolve(performance.now() - started), { once: true }));
  const first = deadlineSignal(80);
  const firstAt = abortedAt(first);
  expect(deadlineSignal(80)).toBe(first); // the same slot: one controller
  expect(deadlineSignal(81)).not.toBe(first); // another length
  await Bun.sleep(25); // past the slot (20 ms)
  const secondStarted = performance.now() - started;
  const second = deadlineSignal(80);
  const secondAt = abortedAt(second);
  expect(second).not.toBe(first);
  expect(await firstAt).toBeGreaterThanOrEqual(80);
  expect(await secondAt).toBeGreaterThanOrEqual(secondStarted + 80);
  // A fetch that is still waiting when its slot fires fails with the AbortError the forwarder reads as a deadline.
  const server = Bun.serve({ port: 0, fetch: () => Bun.sleep(2_000).then(() => new Response("late")) });
  try {
    const t0 = performance.now();
    const err = await fetch(`http://127.0.0.1:${server.port}/`, { signal: deadlineSignal(50) }).catch((e: Error) => e);
    expect((err as Error).name).toBe("AbortError");
    expect(performance.now() - t0).toBeGreaterThanOrEqual(49);
  } finally {
    void server.stop(true);
  }
});

test("a callback deadline: ended first it never fires; once due it fires once and end says it came late", async () => {
  let fired = 0;
  const end = deadline(30, () => fired++);
  expect(end()).toBe(true);
  let lateFired = 0;
  const started = performance.now();
  const fire = Promise.withResolvers<void>();
  const endLate = deadline(40, () => (lateFired++, fire.resolve()));
  await fire.promise;
  expect(performance.now() - started).toBeGreaterThanOrEqual(39);
  expect(endLate()).toBe(false);
  // The first one's due time has passed too: it did not fire.
  expect([fired, lateFired]).toEqual([0, 1]);
});
