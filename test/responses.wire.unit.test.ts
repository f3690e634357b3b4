/**
 * The Responses API's texts written from templates (src/providers/responses/wire.ts): the frame and the usage must
 * be exactly what serialising the objects would give, whatever the request held (defaults, nulls, odd values).
 */
import { describe, expect, test } from "bun:test";
import { responseFrame, type ResponsesRequest, responsesUsage, responsesUsageJson } from "../src/providers/responses/wire.ts";

/** The frame as an object, in OpenAI's field order: what the template must serialise to. */
function frameObject(id: string, body: ResponsesRequest, createdAt: number): Record<string, unknown> {
  return {
    id,
    object: "response",
    created_at: createdAt,
    model: body.model,
    error: null,
    incomplete_details: null,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    previous_response_id: body.previous_response_id ?? null,
    reasoning: { effort: body.reasoning?.effort ?? null, summary: body.reasoning?.summary ?? null },
    store: body.store !== false,
    temperature: body.temperature ?? 1,
    text: body.text ?? { format: { type: "text" } },
    tool_choice: body.tool_choice ?? "auto",
    tools: body.tools ?? [],
    top_p: body.top_p ?? 1,
    truncation: "disabled",
    user: null,
    metadata: body.metadata ?? {},
  };
}

const bodies: ResponsesRequest[] = [
  { model: "oa/gpt" },
  { model: 'a "quoted" model\u2028', instructions: null, tools: null as never, metadata: null, text: null as never, reasoning: null },
  {
    model: "m",
    instructions: 'Be terse.\n"Really".',
    max_output_tokens: 16,
    parallel_tool_calls: false,
    previous_response_id: "resp_1",
    reasoning: { effort: "high", summary: "auto" },
    store: false,
    temperature: 0,
    top_p: 0.5,
    text: { format: { type: "json_schema", name: "x", schema: { type: "object" }, strict: true } },
    tool_choice: { type: "function", name: "lookup" },
    tools: [{ type: "function", name: "lookup", parameters: { type: "object" } }],
    metadata: { k: "v" },
  },
  { model: "m", reasoning: "high" as never, metadata: false as never, tools: [], store: null },
];

describe("Responses wire templates", () => {
  test("the frame is the object's JSON, with error, incomplete_details and the answer's own fields in place", () => {
    for (const body of bodies) {
      const frame = responseFrame("resp_abc", body);
      const text = frame('{"code":"server_error"}', '{"reason":"max_output_tokens"}', ',"status":"failed","usage":null');
      const parsed = JSON.parse(text) as Record<string, unknown>;
      const expected = {
        ...frameObject("resp_abc", body, parsed.created_at as number),
        error: { code: "server_error" },
        incomplete_details: { reason: "max_output_tokens" },
        status: "failed",
        usage: null,
      };
      expect(text).toBe(JSON.stringify(expected));
    }
  });

  test("the usage is responsesUsage's JSON, also for counts that are not safe integers", () => {
    const usages = [
      { prompt_tokens: 11, completion_tokens: 5 },
      {
        prompt_tokens: 11,
        completion_tokens: 5,
        prompt_tokens_details: { cached_tokens: 3 },
        completion_tokens_details: { reasoning_tokens: 2 },
      },
      {},
      { prompt_tokens: 1.5, completion_tokens: 2 },
      { prompt_tokens: 1, completion_tokens: 2, prompt_tokens_details: { cached_tokens: "3" as never } },
    ];
    for (const u of usages) expect(responsesUsageJson(u)).toBe(JSON.stringify(responsesUsage(u)));
  });
});
