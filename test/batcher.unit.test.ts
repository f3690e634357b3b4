/**
 * ShardBatcher's riders (src/ledger/batcher.ts ride): commands that ride with a shard's next call are put on the
 * connection right after it, in order, and at once when nothing waits; a flush takes them along.
 */
import { describe, expect, test } from "bun:test";
import { ShardBatcher } from "../src/ledger/batcher.ts";

/** A batcher whose calls are recorded and answered by hand. */
function recorded() {
  const order: string[] = [];
  const answers: (() => void)[] = [];
  const b = new ShardBatcher<string, string>((shard, items) => {
    order.push(`call ${shard} ${items.join(",")}`);
    return new Promise<string[]>((resolve) => answers.push(() => resolve(items)));
  });
  return { b, order, answers };
}

describe("ShardBatcher riders", () => {
  test("nothing waits: a rider goes at once", () => {
    const { b, order } = recorded();
    b.ride("s1", () => order.push("rider"));
    expect(order).toEqual(["rider"]);
    void b.submit("s1", "a"); // in flight now, nothing queued
    b.ride("s1", () => order.push("rider 2"));
    expect(order).toEqual(["rider", "call s1 a", "rider 2"]);
  });

  test("items waiting behind a call in flight: a rider goes right after them, with their call", async () => {
    const { b, order, answers } = recorded();
    const a = b.submit("s1", "a");
    const c = b.submit("s1", "b"); // queued: a's call is in flight
    b.ride("s1", () => order.push("rider"));
    b.ride("s2", () => order.push("other shard")); // nothing waits there
    expect(order).toEqual(["call s1 a", "other shard"]);
    answers[0]!();
    expect(await a).toBe("a");
    // The next call goes when the first one's reply has been handed out (a few promise turns, no timer).
    for (let turn = 0; turn < 10 && answers.length < 2; turn++) await Promise.resolve();
    expect(order).toEqual(["call s1 a", "other shard", "call s1 b", "rider"]);
    answers[1]!();
    expect(await c).toBe("b");
  });

  test("a flush sends the waiting items and their riders now, while a call is in flight", () => {
    const { b, order } = recorded();
    void b.submit("s1", "a");
    void b.submit("s1", "b");
    b.ride("s1", () => order.push("rider"));
    b.flush("s1");
    expect(order).toEqual(["call s1 a", "call s1 b", "rider"]);
  });

  test("waiting: true only while a shard's items queue behind its call in flight (what Ledger.alongside rides on)", () => {
    const { b, answers } = recorded();
    expect(b.waiting("s1")).toBe(false);
    void b.submit("s1", "a"); // sent at once: in flight, nothing waits
    expect(b.waiting("s1")).toBe(false);
    void b.submit("s1", "b");
    expect(b.waiting("s1")).toBe(true);
    expect(b.waiting("s2")).toBe(false);
    b.flush("s1");
    expect(b.waiting("s1")).toBe(false);
    expect(answers.length).toBe(2);
  });
});
