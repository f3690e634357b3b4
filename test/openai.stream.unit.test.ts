/**
 * The OpenAI stream translator (src/providers/openai/stream.ts) on its own: compact chunks are renamed as text and
 * their output kept unread, the rest parsed; what the client gets and what is counted must not depend on which.
 */
import { describe, expect, test } from "bun:test";
import { openOpenaiStream } from "../src/providers/openai/stream.ts";
import { SseDecoder } from "../src/providers/sse.ts";

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

  // What a chat client reads: the relay's bytes as they are, its payloads through the translator (MeteredStream).
  const relayed = (includeUsage: boolean, reads: string[]) => {
    const t = openOpenaiStream(includeUsage, "oa/gpt");
    const relay = t.relay!();
    const dec = new TextDecoder();
    let out = "";
    const payloads: string[] = [];
    const steps: object[] = [];
    const take = (parts: (Uint8Array | string)[]) => {
      for (const p of parts) {
        if (typeof p !== "string") out += dec.decode(p);
        else {
          payloads.push(p);
          const step = t(p);
          steps.push(step);
          if (step.chunk) out += `data: ${step.chunk}\n\n`;
        }
      }
    };
    for (const r of reads) take(relay.push(new TextEncoder().encode(r)));
    take(relay.end());
    return { out, payloads, steps, generated: t.generated!() };
  };
  // The same stream the way the translator alone passes it on (every payload decoded and written again).
  const translated = (includeUsage: boolean, sse: string) => {
    const t = openOpenaiStream(includeUsage, "oa/gpt");
    const dec = new SseDecoder();
    let out = "";
    for (const p of [...dec.push(new TextEncoder().encode(sse)), ...dec.end()]) {
      const step = t(p);
      if (step.chunk) out += `data: ${step.chunk}\n\n`;
    }
    return { out, generated: t.generated!() };
  };
  const usage = { prompt_tokens: 7, completion_tokens: 3 };
  const ev = (payload: string) => `data: ${payload}\n\n`;
  const content = (w: string, extra: object = { usage: null }) => ev(chunk("gpt-4o", { content: w }, extra));

  test("relayed: content chunks pass as the provider's bytes, only the model's value replaced; the rest reaches the translator", () => {
    const sse =
      content('say "model": and "usage":{} and \\') +
      ev(chunk("oa/gpt", { content: "x" })) +
      ev(chunk(undefined, { content: "y" })) +
      ev(JSON.stringify({ id: "c1", model: "gpt-4o", choices: [], usage })) +
      "data: [DONE]\n\n";
    const r = relayed(true, [sse]);
    expect(r.out).toBe(sse.replaceAll('"model":"gpt-4o"', '"model":"oa/gpt"').replace("data: [DONE]\n\n", ""));
    // Only the usage chunk and the end were read as payloads.
    expect(r.payloads).toEqual([JSON.stringify({ id: "c1", model: "gpt-4o", choices: [], usage }), "[DONE]"]);
    expect(r.steps.at(-2)).toMatchObject({ usage });
    expect(r.steps.at(-1)).toEqual({ done: true });
    expect(r.generated).toBe("");
  });

  test("relayed: however the reads cut the bytes, the client gets what the translator alone would send, and the same count", () => {
    const sse =
      ev(chunk("gpt-4o", { role: "assistant", content: "" }, { usage: null })) +
      content("Hé ✓ 🎉") +
      ": keep-alive comment\n\n" +
      "event: note\ndata: " +
      chunk("gpt-4o", { content: "named" }) +
      "\n\n" +
      ev(chunk("gpt-4o", { content: "spaced" }).replace('"model":', '"model": ')) +
      "data:" +
      chunk("gpt-4o", { content: "nospace" }) +
      "\n\n" +
      "data: " +
      chunk("gpt-4o", { content: "two" }).replace(",", "\ndata: ,") +
      "\n\n" +
      "\n" +
      ev(chunk("gpt-4o", { tool_calls: [{ index: 0, function: { name: "lookup", arguments: '{"model":"q"}' } }] }, { usage: null })) +
      ev(chunk("gpt-4o", {}, { usage: null })) +
      "data: [DONE]\n\n";
    for (const includeUsage of [true, false]) {
      const whole = translated(includeUsage, sse);
      const bytes = new TextEncoder().encode(sse);
      const dec = new TextDecoder();
      // Whole, one byte at a time, and cut at every 7th byte (inside characters of more than one byte too).
      const cuts = [
        [bytes.length],
        Array.from(bytes, (_, i) => i + 1),
        Array.from({ length: Math.ceil(bytes.length / 7) }, (_, i) => Math.min(bytes.length, (i + 1) * 7)),
      ];
      for (const at of cuts) {
        const reads: string[] = [];
        // Reads as bytes: encoded back to the same bytes (a cut inside a character is kept by pushing bytes below).
        let from = 0;
        const t = openOpenaiStream(includeUsage, "oa/gpt");
        const relay = t.relay!();
        let out = "";
        const take = (parts: (Uint8Array | string)[]) => {
          for (const p of parts) {
            if (typeof p !== "string") out += dec.decode(p, { stream: true });
            else {
              const step = t(p);
              if (step.chunk) out += `data: ${step.chunk}\n\n`;
            }
          }
        };
        for (const to of at) {
          take(relay.push(bytes.subarray(from, to)));
          from = to;
        }
        take(relay.end());
        reads.push(out);
        expect(out).toBe(whole.out);
        expect(t.generated!()).toBe(whole.generated);
      }
    }
  });

  test("relayed: a CR anywhere and the stream is decoded from there on, as the translator alone reads it", () => {
    const sse = content("a") + content("b").replaceAll("\n", "\r\n") + content("c") + "data: [DONE]\r\n\r\n";
    expect(relayed(true, [content("a"), content("b").replaceAll("\n", "\r\n") + content("c"), "data: [DONE]\r\n\r\n"]).out).toBe(
      translated(true, sse).out,
    );
  });

  test("relayed: an error event and a usage chunk are read; without usage the relayed bytes are counted in order", () => {
    const failing = relayed(true, [content("a") + ev('{"error":{"message":"overloaded"}}')]);
    expect(failing.steps).toEqual([{ failed: true }]);
    expect(failing.out).toBe(content("a").replace('"gpt-4o"', '"oa/gpt"'));
    // The client did not ask for usage: the usage chunk is dropped, a content chunk carrying it loses it.
    const hidden = relayed(false, [content("a"), ev(chunk("gpt-4o", { content: "b" }, { usage })), "data: [DONE]\n\n"]);
    expect(hidden.out).toBe(content("a").replace('"gpt-4o"', '"oa/gpt"') + ev(chunk("oa/gpt", { content: "b" })));
    expect(hidden.generated).toBe("");
    // No usage at all: everything relayed is counted, past the unread limit too (counted on the way), in order.
    const words = Array.from({ length: 1_500 }, (_, i) => ` w${i}`.padEnd(50, "·"));
    const counted = relayed(true, [
      ...words.map((w, i) => (i % 300 === 0 ? content(w).replace('"model":', '"model": ') : content(w))),
      "data: [DONE]\n\n",
    ]);
    expect(counted.generated).toBe(words.join(""));
  });
});
