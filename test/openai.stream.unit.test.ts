/**
 * The OpenAI stream translator (src/providers/openai/stream.ts) on its own: compact chunks are renamed as text and
 * their output kept unread, the rest parsed; what the client gets and what is counted must not depend on which.
 */
import { describe, expect, test } from "bun:test";
import { openOpenaiStream } from "../src/providers/openai/stream.ts";

const chunk = (model: string | undefined, delta: object, extra: object = {}) =>
  JSON.stringify({
    id: "c1",
    object: "chat.completion.chunk",
    ...(model === undefined ? {} : { model }),
    choices: [{ index: 0, delta, finish_reason: null }],
    ...extra,
  });

describe("OpenAI stream translation", () => {
  test("a compact chunk names the client's model, with every other byte as the provider sent it", () => {
    const t = openOpenaiStream(true, "oa/gpt");
    const sent = chunk("gpt-4o", { content: 'say "model" and usage' }, { usage: null });
    expect(t(sent)).toEqual({ chunk: sent.replace('"model":"gpt-4o"', '"model":"oa/gpt"') });
    // Already the client's model, or no model at all: passed on as is.
    expect(t(chunk("oa/gpt", { content: "x" }))).toEqual({ chunk: chunk("oa/gpt", { content: "x" }) });
    expect(t(chunk(undefined, { content: "y" }))).toEqual({ chunk: chunk(undefined, { content: "y" }) });
  });

  test("a chunk with usage, an error, or not in compact form is parsed: usage taken, error fails, spacing renamed", () => {
    const t = openOpenaiStream(false, "oa/gpt");
    expect(t('{"error":{"message":"overloaded"}}')).toEqual({ failed: true });
    expect(() => t("<html>bad gateway</html>")).toThrow(); // MeteredStream: a failed stream, released
    const spaced = '{"id":"c1", "model": "gpt-4o", "choices":[]}';
    expect(JSON.parse(t(spaced).chunk!)).toEqual({ id: "c1", model: "oa/gpt", choices: [] });
    // The client did not ask for usage: the usage-only chunk is dropped, its usage kept.
    expect(t(JSON.stringify({ id: "c1", model: "gpt-4o", choices: [], usage: { prompt_tokens: 7, completion_tokens: 3 } }))).toEqual({
      usage: { prompt_tokens: 7, completion_tokens: 3 },
    });
    expect(t.generated!()).toBe("");
  });

  test("without usage, the generated text is every chunk's output in order, across the unread limit and parsed chunks", () => {
    const t = openOpenaiStream(true, "oa/gpt");
    const words: string[] = [];
    for (let i = 0; i < 1_200; i++) {
      const w = ` word${i}`.padEnd(60, "·"); // > 64 KiB of chunks in all: the unread ones are counted on the way
      words.push(w);
      // Every 100th chunk is spaced out, so it takes the parsed path between unread ones.
      const c = i % 100 === 0 ? chunk("gpt-4o", { content: w }).replace('"model":', '"model": ') : chunk("gpt-4o", { content: w });
      expect(JSON.parse(t(c).chunk!).model).toBe("oa/gpt");
    }
    t(chunk("gpt-4o", { tool_calls: [{ index: 0, function: { name: "lookup", arguments: '{"q":1}' } }] }));
    expect(t("[DONE]")).toEqual({ done: true });
    expect(t.generated!()).toBe(`${words.join("")}lookup{"q":1}`);
  });

  test("for a door: every chunk comes parsed (not renamed), counted as chat's, a `{…}` that is not JSON as text", () => {
    const t = openOpenaiStream(false, "oa/gpt", true);
    expect(t(chunk("gpt-4o", { content: "Hi" }))).toEqual({ parsed: JSON.parse(chunk("gpt-4o", { content: "Hi" })), usage: undefined });
    // What chat passes on unparsed reaches the door as text, and is counted whole; anything else fails the stream.
    expect(t("{not json}")).toEqual({ chunk: "{not json}" });
    expect(() => t("<html>bad gateway</html>")).toThrow();
    expect(t('{"error":{"message":"overloaded"}}')).toEqual({ failed: true });
    expect(t.generated!()).toBe("Hi{not json}");
    // The client did not ask for usage: a usage-only chunk is dropped, a content chunk loses its usage.
    const usage = { prompt_tokens: 7, completion_tokens: 3 };
    expect(t(JSON.stringify({ id: "c1", model: "gpt-4o", choices: [], usage }))).toEqual({ usage });
    const last = t(chunk("gpt-4o", { content: "!" }, { usage }));
    expect(last).toEqual({ parsed: JSON.parse(chunk("gpt-4o", { content: "!" })), usage });
    expect(t("[DONE]")).toEqual({ done: true });
    expect(t.generated!()).toBe("");
  });
});
