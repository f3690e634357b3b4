/**
 * A Responses request's tools on their way to chat completions and back (src/providers/responses/tools.ts): a
 * namespace's tools go up flat under names that never take one of the request's, and come back as the client
 * declared them; tools no chat provider runs are left out and named.
 */
import { describe, expect, test } from "bun:test";
import { responseObject } from "../src/providers/responses/answer.ts";
import { toChatRequest } from "../src/providers/responses/request.ts";
import { responsesStream } from "../src/providers/responses/stream.ts";
import { customInput, ResponsesTools } from "../src/providers/responses/tools.ts";
import { newId, responseFrame, type ResponsesRequest, type ResponsesTool } from "../src/providers/responses/wire.ts";

const fn = (name: string): ResponsesTool => ({ type: "function", name, parameters: { type: "object", properties: {} } });
const chatNames = (tools: ResponsesTools) => tools.chat.map((t) => (t as { function: { name: string } }).function.name);

describe("ResponsesTools", () => {
  test("a namespace's function tools go up as namespace__name; the way back names the tool and its namespace", () => {
    const tools = new ResponsesTools([
      fn("exec_command"),
      { type: "namespace", name: "multi_agent_v1", tools: [fn("spawn_agent"), fn("wait")] } as ResponsesTool,
    ]);
    expect(chatNames(tools)).toEqual(["exec_command", "multi_agent_v1__spawn_agent", "multi_agent_v1__wait"]);
    expect(tools.clientName("multi_agent_v1__spawn_agent")).toEqual({ name: "spawn_agent", namespace: "multi_agent_v1" });
    expect(tools.clientName("exec_command")).toEqual({ name: "exec_command" });
    expect(tools.chatName("spawn_agent", "multi_agent_v1")).toBe("multi_agent_v1__spawn_agent");
    expect(tools.leftOut).toEqual([]);
  });

  test("a flat name never takes one of the request's own, nor another flat one; unsafe characters and length are made chat's", () => {
    const long = "n".repeat(70);
    const tools = new ResponsesTools([
      fn("a__b"),
      { type: "namespace", name: "a", tools: [fn("b"), fn("b.c")] } as ResponsesTool,
      { type: "namespace", name: "a_", tools: [fn("_b")] } as ResponsesTool,
      { type: "namespace", name: long, tools: [fn("x"), fn("y")] } as ResponsesTool,
    ]);
    const names = chatNames(tools);
    expect(names.slice(0, 4)).toEqual(["a__b", "a__b_2", "a__b_c", "a____b"]);
    expect(new Set(names).size).toBe(names.length);
    for (const n of names) expect(n).toMatch(/^[A-Za-z0-9_-]{1,64}$/);
    expect(names[4]).toBe(`${long}`.slice(0, 64));
    expect(names[5]).toBe(`${long}`.slice(0, 62) + "_2");
    expect(tools.clientName("a__b_2")).toEqual({ name: "b", namespace: "a" });
    expect(tools.clientName(names[5]!)).toEqual({ name: "y", namespace: long });
  });

  test("hosted tools and what a namespace holds besides functions are left out, each named once", () => {
    const tools = new ResponsesTools([
      { type: "web_search", external_web_access: false } as ResponsesTool,
      fn("f"),
      { type: "web_search" },
      { type: "file_search" },
      { type: "namespace", name: "ns", tools: [{ type: "web_search" }] } as ResponsesTool,
    ]);
    expect(chatNames(tools)).toEqual(["f"]);
    expect(tools.leftOut).toEqual(["web_search", "file_search", "ns.web_search"]);
  });
});

describe("through the request and the answer", () => {
  const body: ResponsesRequest = {
    model: "m",
    input: [
      { type: "message", role: "user", content: "hi" },
      { type: "function_call", call_id: "c1", name: "spawn_agent", namespace: "multi_agent_v1", arguments: "{}" },
      { type: "function_call_output", call_id: "c1", output: "ok" },
    ],
    tools: [
      fn("spawn_agent"),
      { type: "namespace", name: "multi_agent_v1", tools: [fn("spawn_agent")] } as ResponsesTool,
      { type: "web_search" },
    ],
    tool_choice: { type: "function", name: "spawn_agent", namespace: "multi_agent_v1" },
  };

  test("a call of a namespaced tool goes up under its flat name, distinct from the request's own tool of the same name", () => {
    const { chat, tools } = toChatRequest(body, body.input as never);
    expect(chatNames(tools)).toEqual(["spawn_agent", "multi_agent_v1__spawn_agent"]);
    expect(chat.tool_choice).toEqual({ type: "function", function: { name: "multi_agent_v1__spawn_agent" } });
    expect((chat.messages[1] as { tool_calls: unknown }).tool_calls).toEqual([
      { id: "c1", type: "function", function: { name: "multi_agent_v1__spawn_agent", arguments: "{}" } },
    ]);
    expect(tools.leftOut).toEqual(["web_search"]);
  });

  test("only hosted tools: no tools and no tool_choice upstream", () => {
    const { chat, tools } = toChatRequest({ model: "m", input: "hi", tools: [{ type: "web_search" }], tool_choice: "required" }, [
      { type: "message", role: "user", content: "hi" },
    ]);
    expect(chat.tools).toBeUndefined();
    expect(chat.tool_choice).toBeUndefined();
    expect(tools.leftOut).toEqual(["web_search"]);
  });

  const chatCall = (name: string) => ({ id: "c2", type: "function", function: { name, arguments: '{"a":1}' } });

  test("JSON: a flat call comes back as function_call with namespace and the tool's own name; the request's own tool stays as it is", () => {
    const { tools } = toChatRequest(body, body.input as never);
    const chat = {
      choices: [
        {
          message: { role: "assistant", content: null, tool_calls: [chatCall("multi_agent_v1__spawn_agent"), chatCall("spawn_agent")] },
          finish_reason: "tool_calls",
        },
      ],
    };
    const { output } = responseObject(responseFrame(newId("resp"), body), JSON.stringify(chat), undefined, tools);
    expect(output).toMatchObject([
      { type: "function_call", name: "spawn_agent", namespace: "multi_agent_v1", call_id: "c2", arguments: '{"a":1}' },
      { type: "function_call", name: "spawn_agent", call_id: "c2" },
    ]);
    expect(output[1]).not.toHaveProperty("namespace");
  });

  test("stream: the added and done items and response.completed carry the namespace", () => {
    const { tools } = toChatRequest(body, body.input as never);
    let kept: unknown[] = [];
    const door = responsesStream(responseFrame(newId("resp"), body, true), (output) => (kept = output), tools);
    let text = door.open();
    const delta = { index: 0, id: "c2", type: "function", function: { name: "multi_agent_v1__spawn_agent", arguments: "" } };
    text += door.next({ choices: [{ index: 0, delta: { tool_calls: [delta] }, finish_reason: null }] });
    text += door.next({
      choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: "{}" } }] }, finish_reason: "tool_calls" }],
    });
    text += door.next({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 2 } });
    door.settled!();
    text += door.next("[DONE]");
    const events = text
      .split("\n\n")
      .filter(Boolean)
      .map((f) => JSON.parse(f.split("\ndata: ")[1]!));
    const added = events.find((e) => e.type === "response.output_item.added");
    const done = events.find((e) => e.type === "response.output_item.done");
    const completed = events.at(-1);
    for (const item of [added.item, done.item, completed.response.output[0], kept[0]])
      expect(item).toMatchObject({ type: "function_call", name: "spawn_agent", namespace: "multi_agent_v1" });
    expect(completed.type).toBe("response.completed");
  });
});

describe("custom tools and additional_tools items (Codex's defaults)", () => {
  const grammar = { type: "grammar", syntax: "lark", definition: "start: /[\\s\\S]+/" };
  const body: ResponsesRequest = {
    model: "m",
    input: [
      {
        type: "additional_tools",
        role: "developer",
        tools: [
          {
            type: "namespace",
            name: "functions",
            tools: [{ type: "custom", name: "exec", description: "Run JS", format: grammar }, fn("wait")],
          },
          { type: "web_search" },
        ],
      } as never,
      { type: "message", role: "user", content: "hi" },
      { type: "custom_tool_call", call_id: "c1", name: "exec", namespace: "functions", input: 'text("a")' },
      { type: "custom_tool_call_output", call_id: "c1", output: [{ type: "input_text", text: "a" }] },
      { type: "custom_tool_call", call_id: "c2", name: "apply_patch", input: "*** Begin Patch" },
      { type: "custom_tool_call_output", call_id: "c2", output: "done" },
    ],
    tools: [{ type: "custom", name: "apply_patch", format: { type: "text" } }],
    tool_choice: { type: "custom", name: "exec", namespace: "functions" },
  };

  test("the request's tools, then the additional_tools items'; a custom tool a function of one string, its grammar in the parameter's description", () => {
    const { chat, tools } = toChatRequest(body, body.input as never);
    expect(chatNames(tools)).toEqual(["apply_patch", "functions__exec", "functions__wait"]);
    expect(tools.chat[1]).toEqual({
      type: "function",
      function: {
        name: "functions__exec",
        description: "Run JS",
        parameters: {
          type: "object",
          properties: {
            input: {
              type: "string",
              description: `The tool's whole input, as raw text (not JSON). It must match this lark grammar:\n${grammar.definition}`,
            },
          },
          required: ["input"],
          additionalProperties: false,
        },
      },
    });
    expect((tools.chat[0] as any).function.parameters.properties.input.description).toBe("The tool's whole input, as raw text (not JSON).");
    expect(tools.clientName("functions__exec")).toEqual({ name: "exec", namespace: "functions", custom: true });
    expect(tools.clientName("apply_patch")).toEqual({ name: "apply_patch", custom: true });
    expect(tools.clientName("functions__wait")).toEqual({ name: "wait", namespace: "functions" });
    expect(tools.leftOut).toEqual(["web_search"]);
    expect(chat.tool_choice).toEqual({ type: "function", function: { name: "functions__exec" } });
  });

  test("a custom tool's calls and outputs go up as function calls ({input}) and tool results; the additional_tools item is no message", () => {
    const { chat } = toChatRequest(body, body.input as never);
    expect(chat.messages).toEqual([
      { role: "user", content: "hi" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c1", type: "function", function: { name: "functions__exec", arguments: '{"input":"text(\\"a\\")"}' } }],
      },
      { role: "tool", tool_call_id: "c1", content: [{ type: "text", text: "a" }] },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c2", type: "function", function: { name: "apply_patch", arguments: '{"input":"*** Begin Patch"}' } }],
      },
      { role: "tool", tool_call_id: "c2", content: "done" },
    ]);
  });

  test("customInput: the input string of {input}; arguments of any other shape as they are", () => {
    expect(customInput('{"input":"x = 1\\n"}')).toBe("x = 1\n");
    expect(customInput('{"input": ""}')).toBe("");
    expect(customInput('{"city": "Paris"}')).toBe('{"city": "Paris"}');
    expect(customInput('{"input": 3}')).toBe('{"input": 3}');
    expect(customInput("console.log(1)")).toBe("console.log(1)");
    expect(customInput("")).toBe("");
  });

  test("JSON: a call of a custom tool comes back as custom_tool_call with its input (and namespace); a function's as function_call", () => {
    const { tools } = toChatRequest(body, body.input as never);
    const call = (id: string, name: string, args: string) => ({ id, type: "function", function: { name, arguments: args } });
    const chat = {
      choices: [
        {
          message: {
            role: "assistant",
            content: null,
            tool_calls: [call("c3", "functions__exec", '{"input":"await tools.wait()"}'), call("c4", "functions__wait", '{"cell_id":"1"}')],
          },
          finish_reason: "tool_calls",
        },
      ],
    };
    const { output, json } = responseObject(responseFrame(newId("resp"), body), JSON.stringify(chat), undefined, tools);
    expect(output).toEqual([
      {
        id: expect.stringMatching(/^ctc_[0-9a-f]{48}$/),
        type: "custom_tool_call",
        status: "completed",
        call_id: "c3",
        name: "exec",
        namespace: "functions",
        input: "await tools.wait()",
      },
      {
        id: expect.stringMatching(/^fc_/),
        type: "function_call",
        status: "completed",
        call_id: "c4",
        name: "wait",
        namespace: "functions",
        arguments: '{"cell_id":"1"}',
      },
    ]);
    expect(JSON.parse(json).output).toEqual(JSON.parse(JSON.stringify(output)));
  });

  test("stream: a custom call's input is sent once its arguments are whole (one delta, done), the item added, done and completed as a custom_tool_call", () => {
    const { tools } = toChatRequest(body, body.input as never);
    let kept: any[] = [];
    const door = responsesStream(responseFrame(newId("resp"), body, true), (output) => (kept = output), tools);
    let text = door.open();
    text += door.next({
      choices: [
        {
          index: 0,
          delta: { tool_calls: [{ index: 0, id: "c5", type: "function", function: { name: "functions__exec", arguments: "" } }] },
        },
      ],
    });
    for (const piece of ['{"inp', 'ut":"text(\\"', 'a\\")"}'])
      text += door.next({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: piece } }] } }] });
    text += door.next({ choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] });
    text += door.next({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 2 } });
    door.settled!();
    text += door.next("[DONE]");
    const events = text
      .split("\n\n")
      .filter(Boolean)
      .map((f) => JSON.parse(f.split("\ndata: ")[1]!));
    expect(events.map((e) => e.type)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.custom_tool_call_input.delta",
      "response.custom_tool_call_input.done",
      "response.output_item.done",
      "response.completed",
    ]);
    const id = events[2].item.id;
    expect(events[2].item).toEqual({
      id,
      type: "custom_tool_call",
      status: "in_progress",
      call_id: "c5",
      name: "exec",
      namespace: "functions",
      input: "",
    });
    expect(events[3]).toMatchObject({ item_id: id, output_index: 0, delta: 'text("a")' });
    expect(events[4]).toMatchObject({ item_id: id, output_index: 0, input: 'text("a")' });
    const done = { ...events[2].item, status: "completed", input: 'text("a")' };
    expect(events[5].item).toEqual(done);
    expect(events[6].response.output).toEqual([done]);
    expect(JSON.parse(JSON.stringify(kept))).toEqual([done]);
  });
});
