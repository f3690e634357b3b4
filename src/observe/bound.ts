/**
 * Labelled metric children bound once per label set. prom-client hashes the labels object on every labelled call
 * (its own `labels()` children too: they rebind the object, then hash it again), which was a share of every
 * request's CPU (issue 31). A child here keeps the series' key, computed once; a call adds to the series' entry
 * in the metric's map directly, as prom-client's own inc/observe do (prom-client 15, pinned in package.json;
 * test/observe.bound.unit.test.ts checks the text a scrape reads is the same). Where the entry is not there (first
 * use, or a reset), the call goes through prom-client's labelled API, which creates it.
 */
import type * as Prom from "prom-client";

const { hashObject } = require("prom-client/lib/util") as { hashObject(labels: object, names?: string[]): string };

type Labels = Record<string, string>;
interface CounterEntry {
  value: number;
}
interface HistogramEntry {
  sum: number;
  count: number;
  bucketValues: Record<number, number>;
}
interface Internals<E> {
  hashMap: Record<string, E | undefined>;
  sortedLabelNames: string[];
  upperBounds: number[];
}

export interface CounterChild {
  inc(value?: number): void;
}
export interface HistogramChild {
  observe(value: number): void;
}

function counterChild(metric: Prom.Counter<string>, labels: Labels): CounterChild {
  const m = metric as unknown as Internals<CounterEntry>;
  const hash = hashObject(labels, m.sortedLabelNames);
  return {
    inc(value = 1) {
      const entry = m.hashMap[hash];
      if (entry && value >= 0 && Number.isFinite(value)) entry.value += value;
      else metric.inc(labels, value);
    },
  };
}

function histogramChild(metric: Prom.Histogram<string>, labels: Labels): HistogramChild {
  const m = metric as unknown as Internals<HistogramEntry>;
  const hash = hashObject(labels, m.sortedLabelNames);
  const bounds = m.upperBounds;
  return {
    observe(value) {
      const entry = m.hashMap[hash];
      if (!entry || !Number.isFinite(value)) return metric.observe(labels, value);
      entry.sum += value;
      entry.count += 1;
      // The first bound at or above the value (prom-client's findBound); above every bound only +Inf counts it.
      for (let i = 0; i < bounds.length; i++) {
        if (value <= bounds[i]!) {
          entry.bucketValues[bounds[i]!]! += 1;
          return;
        }
      }
    },
  };
}

/**
 * The children of one labelled metric, by a key the caller builds from the label values (a string it joins
 * anyway, cheaper than prom-client's hash); `labels` is called only for a key not seen before.
 */
export function boundCounters<L extends Labels>(metric: Prom.Counter<string>): (key: string, labels: () => L) => CounterChild {
  const children = new Map<string, CounterChild>();
  return (key, labels) => {
    let child = children.get(key);
    if (!child) children.set(key, (child = counterChild(metric, labels())));
    return child;
  };
}

export function boundHistograms<L extends Labels>(metric: Prom.Histogram<string>): (key: string, labels: () => L) => HistogramChild {
  const children = new Map<string, HistogramChild>();
  return (key, labels) => {
    let child = children.get(key);
    if (!child) children.set(key, (child = histogramChild(metric, labels())));
    return child;
  };
}
