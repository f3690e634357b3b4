/**
 * A strict reader of the Prometheus text exposition format (0.0.4): every line must be a HELP, a TYPE or a sample
 * of a declared family, or it throws. Enough to prove /metrics is scrapeable and to read its values.
 */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (-?[0-9.e+-]+|NaN|[+-]Inf)(?: -?[0-9]+)?$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)/gy;
const TYPES = new Set(["counter", "gauge", "histogram", "summary", "untyped"]);

/** Declared families (name → type) and every sample; throws on any line outside the format. */
export interface Exposition {
  types: Map<string, string>;
  samples: Sample[];
}

export function parsePrometheus(text: string): Exposition {
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "") continue;
    const meta = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$/.exec(line);
    if (meta) {
      if (meta[1] === "TYPE") {
        if (!TYPES.has(meta[3]!)) throw new Error(`bad TYPE: ${line}`);
        types.set(meta[2]!, meta[3]!);
      }
      continue;
    }
    const m = SAMPLE.exec(line);
    if (!m) throw new Error(`not a Prometheus sample line: ${JSON.stringify(line)}`);
    const name = m[1]!;
    const family = [name, name.replace(/_(bucket|sum|count)$/, "")].find((n) => types.has(n));
    if (!family) throw new Error(`sample of an undeclared family: ${name}`);
    const labels: Record<string, string> = {};
    if (m[2]) {
      LABEL.lastIndex = 0;
      let l: RegExpExecArray | null;
      let read = 0;
      while ((l = LABEL.exec(m[2]))) {
        labels[l[1]!] = l[2]!.replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
        read = LABEL.lastIndex;
      }
      if (read !== m[2].length) throw new Error(`bad labels: ${line}`);
    }
    samples.push({ name, labels, value: Number(m[3]) });
  }
  return { types, samples };
}
