/**
 * The Messages door's events written from text templates (src/providers/anthropic/messagesStream.ts) must be exactly
 * what serialising Anthropic's event objects gives: the SDKs parse them, and any drift would show there first.
 */
import { describe, expect, test } from "bun:test";
import { messagesEvents } from "../src/providers/anthropic/messagesStream.ts";

const event = (type: string, data: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
const chunk = (delta: object, finish: string | null = null, extra: object = {}) =>
  JSON.stringify({
    id: "chatcmpl-1",
    object: "chat.completion.chunk",
    model: "m",
    choices: [{ index: 0, delta, finish_reason: finish }],
    ...extra,
  });

describe("Messages door templates", () => {
  test("a text answer, as objects and strings alike: message_start … message_delta with the usage, message_stop", () => {
    for (const asObject of [false, true]) {
      const t = messagesEvents('claude "q"');
      const send = (s: string) => t(asObject ? (JSON.parse(s) as object) : s);
      let out = send(chunk({ role: "assistant", content: "" }));
      out += send(chunk({ content: 'He said "hi"\n' }));
      out += send(chunk({}, "length"));
      out += send(JSON.stringify({ id: "chatcmpl-1", choices: [], usage: { prompt_tokens: 12, completion_tokens: 4 } }));
      out += t("[DONE]");
      const usage = (input: number, output: number) => ({
        input_tokens: input,
        output_tokens: output,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
      });
      const message = {
        id: "msg_chatcmpl-1",
        type: "message",
        role: "assistant",
        model: 'claude "q"',
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: usage(0, 0),
      };
      expect(out).toBe(
        event("message_start", { message }) +
          event("content_block_start", { index: 0, content_block: { type: "text", text: "" } }) +
          event("content_block_delta", { index: 0, delta: { type: "text_delta", text: 'He said "hi"\n' } }) +
          event("content_block_stop", { index: 0 }) +
          event("message_delta", { delta: { stop_reason: "max_tokens", stop_sequence: null }, usage: usage(12, 4) }) +
          event("message_stop", {}),
      );
    }
  });
});
