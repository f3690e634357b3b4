/**
 * Metric children bound once per label set (src/observe/bound.ts) write into prom-client's own series: the text a
 * scrape reads is the one prom-client's labelled calls give for the same calls, first use, a value above every
 * bucket, a series of another label set and a reset included.
 */
import { expect, test } from "bun:test";
import { boundCounters, boundHistograms } from "../src/observe/bound.ts";
import { Counter, Histogram, Registry } from "../src/observe/promClient.ts";

function pair(name: string) {
  const registry = new Registry();
  const counter = new Counter({ name: `${name}_total`, help: "h", labelNames: ["route", "status"] as const, registers: [registry] });
  const histogram = new Histogram({
    name: `${name}_seconds`,
    help: "h",
    labelNames: ["route"] as const,
    buckets: [0.001, 0.01, 0.1, 1],
    registers: [registry],
  });
  return { registry, counter, histogram };
}

test("bound children count and observe exactly as prom-client's labelled calls do", async () => {
  const plain = pair("m");
  const bound = pair("m");
  const counters = boundCounters(bound.counter);
  const histograms = boundHistograms(bound.histogram);
  const calls: [string, string, number][] = [
    ["/a", "200", 0.0005],
    ["/a", "200", 0.001],
    ["/a", "500", 0.05],
    ["/b", "200", 7], // above every bucket: +Inf only
    ["/a", "200", 0.2],
    ["/b", "200", 0.01],
  ];
  const run = () => {
    for (const [route, status, seconds] of calls) {
      plain.counter.inc({ route, status });
      plain.histogram.observe({ route }, seconds);
      counters(`${route} ${status}`, () => ({ route, status })).inc();
      histograms(route, () => ({ route })).observe(seconds);
    }
    plain.counter.inc({ route: "/a", status: "200" }, 3);
    counters("/a 200", () => ({ route: "/a", status: "200" })).inc(3);
  };
  run();
  expect(await bound.registry.metrics()).toBe(await plain.registry.metrics());
  // After a reset the children write into the new series (prom-client replaces its map).
  plain.registry.resetMetrics();
  bound.registry.resetMetrics();
  run();
  expect(await bound.registry.metrics()).toBe(await plain.registry.metrics());
  expect(await bound.registry.metrics()).toContain('m_seconds_bucket{le="+Inf",route="/b"} 2');
});

test("a value prom-client refuses is refused the same way", () => {
  const { counter, histogram } = pair("r");
  const c = boundCounters(counter)("/a 200", () => ({ route: "/a", status: "200" }));
  const h = boundHistograms(histogram)("/a", () => ({ route: "/a" }));
  c.inc();
  h.observe(0.1);
  expect(() => c.inc(-1)).toThrow();
  expect(() => h.observe(Number.NaN)).toThrow();
});
