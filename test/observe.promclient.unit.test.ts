/**
 * The gateway takes prom-client's classes from its files (src/observe/promClient.ts) so that its index, with the
 * default metrics and @opentelemetry/api, stays unloaded: they must be the very classes the index exports, so a
 * prom-client upgrade that moves them fails here.
 */
import { expect, test } from "bun:test";
import * as prom from "prom-client";
import { AggregatorRegistry, Counter, Gauge, Histogram, Registry } from "../src/observe/promClient.ts";

test("prom-client's classes, taken from its files, are the ones its index exports", () => {
  expect(Counter).toBe(prom.Counter);
  expect(Gauge).toBe(prom.Gauge);
  expect(Histogram).toBe(prom.Histogram);
  expect(Registry).toBe(prom.Registry);
  expect(AggregatorRegistry).toBe(prom.AggregatorRegistry);
});
