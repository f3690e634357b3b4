/**
 * The prom-client classes the gateway uses, from prom-client's own files: its index also loads the default
 * process metrics, the Pushgateway and, through them, @opentelemetry/api (84 modules and ~4.8 MiB resident against
 * 10 and ~1.6 MiB; docs/benchmarks.md, "Memory"), none of which the gateway uses. prom-client is pinned in
 * package.json; test/observe.promclient.unit.test.ts checks these are the very classes its index exports.
 */
import type * as Prom from "prom-client";

export const Counter: typeof Prom.Counter = require("prom-client/lib/counter");
export const Gauge: typeof Prom.Gauge = require("prom-client/lib/gauge");
export const Histogram: typeof Prom.Histogram = require("prom-client/lib/histogram");
export const Registry: typeof Prom.Registry = require("prom-client/lib/registry");
export const AggregatorRegistry: typeof Prom.AggregatorRegistry = require("prom-client/lib/cluster");
