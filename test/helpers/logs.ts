/**
 * Error-level log lines a test file causes on purpose (a facilitator taken down, Redis emptied, a lock stolen) are
 * held here for its tests to assert, instead of being printed: a green run prints no error line, so any error line
 * in a run's output is one nobody expected.
 */
import { afterAll, beforeAll } from "bun:test";
import { type LogLevel, setLogSink, standardSink } from "../../src/log.ts";

/** The error lines a test file expects, captured for it to assert on. */
export interface CapturedErrors {
  /** Removes and returns the captured lines whose text matches `re`, parsed. */
  take(re: RegExp): Record<string, unknown>[];
}

/**
 * While this file runs, error lines matching one of `expected` are captured rather than printed; others print as
 * usual. Call it after the file's gateway is started (`sharedGateway` or its own beforeAll), so the capture is still
 * on while that gateway's afterAll closes it: shutdown can log an expected error too.
 */
export function captureErrors(...expected: RegExp[]): CapturedErrors {
  let held: string[] = [];
  const sink = (line: string, level: LogLevel) => {
    if (level === "error" && expected.some((re) => re.test(line))) held.push(line);
    else standardSink(line, level);
  };
  beforeAll(() => void setLogSink(sink));
  afterAll(() => void setLogSink(null));
  return {
    take(re) {
      const taken = held.filter((l) => re.test(l));
      held = held.filter((l) => !re.test(l));
      return taken.map((l) => JSON.parse(l) as Record<string, unknown>);
    },
  };
}
