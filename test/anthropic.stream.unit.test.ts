/**
 * The Anthropic stream translator (src/providers/anthropic/chatStream.ts) for a front door hands over each chunk as
 * an object: the same chunk a chat client reads as JSON, and the same usage, counts and end.
 */
import { describe, expect, test } from "bun:test";
import { openAnthropicStream } from "../src/providers/anthropic/chatStream.ts";

const events = [
  { type: "message_start", message: { id: "msg_1", usage: { input_tokens: 12, cache_read_input_tokens: 2 } } },
  { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
  { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: 'Hi "there"' } },
  { type: "content_block_stop", index: 0 },
  { type: "content_block_start", index: 1, content_block: { type: "tool_use", id: "toolu_1", name: "lookup" } },
  { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: '{"q":1}' } },
  { type: "message_delta", delta: { stop_reason: "tool_use" }, usage: { output_tokens: 7 } },
  { type: "message_stop" },
].map((e) => JSON.stringify(e));

describe("Anthropic stream translation for a door", () => {
  test("every step as chat's, with the chunk as an object instead of its JSON", () => {
    const chat = openAnthropicStream(true, "claude/x");
    const door = openAnthropicStream(true, "claude/x", true);
    let chunks = 0;
    for (const e of events) {
      const a = chat(e);
      const b = door(e);
      expect(b.chunk).toBeUndefined();
      const { chunk, ...rest } = a;
      const { parsed, ...restB } = b;
      expect(restB).toEqual(rest);
      if (chunk === undefined) expect(parsed).toBeUndefined();
      else {
        chunks++;
        // created is the stream's second: the two translators may have started in different seconds.
        expect({ ...(parsed as object), created: 0 }).toEqual({ ...JSON.parse(chunk), created: 0 });
      }
    }
    expect(chunks).toBe(6);
  });
});
