/**
 * Coding agents unmodified: the requests Claude Code, Codex, opencode and Qwen Code sent to a gateway
 * (test/fixtures/agents, helpers/agentFixtures.ts), replayed through the door each used (Messages, Responses, chat
 * completions) to an Anthropic-type stand-in ("claude/…") and an OpenAI-type one ("standin/tool-caller", which calls
 * the first or forced tool while no tool result came back). Each agent makes a tool round trip: its first request
 * answered with a call of one of its tools, then its request carrying the tool's result answered with text. Every
 * request's charge is asserted exactly, in Redis and in Postgres, with the model it billed.
 */
import { describe, expect, test } from "bun:test";
import { agentFixture, replay, sseEvents } from "./helpers/agentFixtures.ts";
import { AFTER_TOOL, inputTokensFor, planFor, TOOL_ID, TOOL_JSON } from "./helpers/anthropicStandin.ts";
import { expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { mediaTokensOf, REPLY_WORDS, TOOL_CALL, usageFor } from "./helpers/openaiStandin.ts";

const gw = sharedGateway();
const START = 10_000_000;
const SONNET = "claude/claude-sonnet-4-5";
const OPUS = "claude/claude-opus-4-7";
const CALLER = "standin/tool-caller";

/** What the Anthropic stand-in billed for the last request it received, and that request. */
function claudeBill() {
  const request = gw.anthropic.requests.at(-1)!;
  return { request, charge: expectedCharge(inputTokensFor(request), planFor(request).outputTokens) };
}

/** What the OpenAI stand-in billed for the last request it received, and that request. */
function standinBill() {
  const request = gw.standin.requests.at(-1)! as Record<string, any>;
  const usage = usageFor(request.messages.length, mediaTokensOf(request.messages));
  return { request, charge: expectedCharge(usage.prompt_tokens, usage.completion_tokens) };
}

type Charge = { amount_usdc: number; model: string };
const byAmount = (rows: Charge[]) => [...rows].sort((a, b) => a.amount_usdc - b.amount_usdc || a.model.localeCompare(b.model));

/** The charges Postgres holds for a wallet (amount and the model billed), in amount order: as `expected` sorted. */
async function expectPgCharges(wallet: string, expected: Charge[]) {
  await gw.services.flusher.drain();
  const rows = await gw.services.sql<Charge[]>`
    SELECT amount_usdc, model FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge'`;
  expect(byAmount(rows.map((r) => ({ amount_usdc: Number(r.amount_usdc), model: r.model })))).toEqual(byAmount(expected));
}

/** Reads a streamed answer whole: status 200, then its events. */
async function streamed(res: Response) {
  const text = await res.text();
  expect({ status: res.status, text: res.status === 200 ? "" : text }).toEqual({ status: 200, text: "" });
  return sseEvents(text);
}

/** The text and tool calls of a Messages stream, and the model its message_start names. */
function messagesStream(events: { data: any }[]) {
  const start = events.find((e) => e.data.type === "message_start")!.data.message;
  const text = events
    .filter((e) => e.data.type === "content_block_delta" && e.data.delta.type === "text_delta")
    .map((e) => e.data.delta.text)
    .join("");
  const tools = events
    .filter((e) => e.data.type === "content_block_start" && e.data.content_block.type === "tool_use")
    .map((e) => e.data.content_block);
  expect(events.at(-1)!.data.type).toBe("message_stop");
  return { model: start.model, text, tools };
}

/** The text and tool calls of a chat-completions stream. */
function chatStream(events: { data: any }[]) {
  const text = events.map((e) => e.data.choices?.[0]?.delta?.content ?? "").join("");
  const calls = events.flatMap((e) => e.data.choices?.[0]?.delta?.tool_calls ?? []).filter((c: any) => c.function?.name);
  return { model: events[0]!.data.model, text, calls, usage: events.at(-1)!.data.usage };
}

/** The completed response of a Responses stream. */
function completed(events: { event?: string; data: any }[]) {
  const done = events.at(-1)!;
  expect(done.event).toBe("response.completed");
  return done.data.response;
}

describe("Claude Code (/v1/messages?beta=true, its anthropic-beta flags)", () => {
  const cc = agentFixture("claude-code");

  test("Anthropic-type model: its title request, then a tool round trip; adaptive thinking and effort go, context_management and the output format stay behind; exact charges", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const charges: number[] = [];

    const title = messagesStream(await streamed(await replay(gw, cc.get("title")!, key)));
    let bill = claudeBill();
    expect(title.model).toBe(OPUS);
    expect(bill.request).toMatchObject({
      model: "claude-opus-4-7",
      max_tokens: 4096,
      thinking: { type: "disabled" },
      output_config: { effort: "xhigh" },
    });
    expect(bill.request.output_config.format).toBeUndefined();
    charges.push(bill.charge);

    const first = messagesStream(await streamed(await replay(gw, cc.get("first")!, key)));
    bill = claudeBill();
    // The stand-in calls the first tool Claude Code declares.
    expect(first.tools).toEqual([{ type: "tool_use", id: TOOL_ID, name: cc.get("first")!.body.tools[0].name, input: {} }]);
    expect(bill.request).toMatchObject({ thinking: { type: "adaptive" }, output_config: { effort: "xhigh" } });
    expect(bill.request.context_management).toBeUndefined();
    expect(bill.request.tools).toHaveLength(cc.get("first")!.body.tools.length);
    charges.push(bill.charge);

    const after = messagesStream(await streamed(await replay(gw, cc.get("toolResult")!, key)));
    bill = claudeBill();
    expect(after.text).toBe(AFTER_TOOL.join(""));
    expect(bill.request.messages.at(-1).content[0]).toMatchObject({ type: "tool_result", tool_use_id: TOOL_ID });
    charges.push(bill.charge);

    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - charges.reduce((a, b) => a + b), locked: 0 });
    await expectPgCharges(
      wallet,
      charges.map((amount_usdc) => ({ amount_usdc, model: OPUS })),
    );
  });

  test("OpenAI-type model: translated to chat, the system turn inside messages a system message; a tool round trip; exact charges", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const first = cc.get("firstTranslated")!;
    expect(first.body.messages.some((m: { role: string }) => m.role === "system")).toBe(true);

    const call = messagesStream(await streamed(await replay(gw, first, key)));
    let bill = standinBill();
    expect(call.model).toBe(CALLER);
    expect(call.tools).toEqual([{ type: "tool_use", id: TOOL_CALL.id, name: first.body.tools[0].name, input: {} }]);
    const systemTurn = first.body.messages.find((m: { role: string }) => m.role === "system").content;
    expect(bill.request.messages.filter((m: any) => m.role === "system").map((m: any) => m.content)).toContain(systemTurn);
    const charges = [bill.charge];

    const after = messagesStream(await streamed(await replay(gw, cc.get("toolResultTranslated")!, key)));
    bill = standinBill();
    expect(after.text).toBe(REPLY_WORDS.join(""));
    expect(bill.request.messages.at(-1)).toMatchObject({ role: "tool", tool_call_id: TOOL_CALL.id });
    charges.push(bill.charge);

    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - charges[0]! - charges[1]!, locked: 0 });
    await expectPgCharges(
      wallet,
      charges.map((amount_usdc) => ({ amount_usdc, model: CALLER })),
    );
  });

  test("its small model's own id (an alias) with the budget thinking it sends a 4.5 model: the budget fits under the clamped max_tokens; answered as the alias, billed as the model", async () => {
    const { wallet, key } = await gw.newWallet(10);
    // What Claude Code sends a Claude 4.5 model: max_tokens 32000 with a 31,999 budget, no effort.
    const res = await replay(gw, cc.get("first")!, key, {
      model: "claude-haiku-4-5",
      thinking: { budget_tokens: 31999, type: "enabled" },
      output_config: undefined,
    });
    const answer = messagesStream(await streamed(res));
    const bill = claudeBill();
    expect(answer.model).toBe("claude-haiku-4-5");
    expect(bill.request).toMatchObject({
      model: "claude-sonnet-4-5",
      max_tokens: 4096,
      thinking: { type: "enabled", budget_tokens: 4095 },
    });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - bill.charge, locked: 0 });
    await expectPgCharges(wallet, [{ amount_usdc: bill.charge, model: SONNET }]);
  });
});

describe("Codex (/v1/responses, its default tools: a namespace and web_search)", () => {
  const cx = agentFixture("codex");
  const first = cx.get("first")!;
  const functions = first.body.tools.filter((t: { type: string }) => t.type === "function").map((t: { name: string }) => t.name);
  const namespace = first.body.tools.find((t: { type: string }) => t.type === "namespace");
  const flattened = namespace.tools.map((t: { name: string }) => `${namespace.name}__${t.name}`);

  test("Anthropic-type model: its default request answers, web_search left out and named in X-Tools-Left-Out, the namespace's tools flat upstream; a tool round trip; exact charges", async () => {
    const { wallet, key } = await gw.newWallet(10);
    expect(first.body.tools.map((t: { type: string }) => t.type)).toContain("web_search");

    const res = await replay(gw, first, key);
    expect(res.headers.get("x-tools-left-out")).toBe("web_search");
    const response = completed(await streamed(res));
    let bill = claudeBill();
    expect(response.model).toBe(SONNET);
    expect(response.output.at(-1)).toMatchObject({ type: "function_call", name: functions[0], call_id: TOOL_ID });
    expect(response.output.at(-1).namespace).toBeUndefined();
    expect(bill.request.tools.map((t: { name: string }) => t.name).sort()).toEqual([...functions, ...flattened].sort());
    const charges = [bill.charge];

    const after = await replay(gw, cx.get("toolResult")!, key);
    expect(after.headers.get("x-tools-left-out")).toBe("web_search");
    const answer = completed(await streamed(after));
    bill = claudeBill();
    expect(answer.output_text).toBe(AFTER_TOOL.join(""));
    charges.push(bill.charge);

    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - charges[0]! - charges[1]!, locked: 0 });
    await expectPgCharges(
      wallet,
      charges.map((amount_usdc) => ({ amount_usdc, model: SONNET })),
    );
  });

  test("a namespaced tool called, by its default model's alias on an OpenAI-type model: the call comes back with its namespace (stream and JSON) and goes up again under its flat name; exact charges", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const spawn = { type: "function", name: "spawn_agent", namespace: namespace.name };
    const over = { model: "gpt-5-codex", tool_choice: spawn };

    const response = completed(await streamed(await replay(gw, first, key, over)));
    let bill = standinBill();
    expect(response.model).toBe("gpt-5-codex");
    const call = response.output.at(-1);
    expect(call).toMatchObject({ type: "function_call", name: "spawn_agent", namespace: namespace.name, call_id: TOOL_CALL.id });
    expect(call.arguments).toBe(TOOL_CALL.arguments.join(""));
    expect(bill.request.tool_choice).toEqual({ type: "function", function: { name: `${namespace.name}__spawn_agent` } });
    expect(bill.request.tools.map((t: any) => t.function.name).sort()).toEqual([...functions, ...flattened].sort());
    const charges = [bill.charge];

    const json = await replay(gw, first, key, { ...over, stream: false });
    expect(json.status).toBe(200);
    expect(json.headers.get("x-tools-left-out")).toBe("web_search");
    const answer = await json.json();
    expect(answer.output.at(-1)).toMatchObject({ type: "function_call", name: "spawn_agent", namespace: namespace.name });
    charges.push(standinBill().charge);

    // The next turn as Codex sends it: the call as it read it, then its output.
    const input = [...first.body.input, call, { type: "function_call_output", call_id: call.call_id, output: "agent spawned" }];
    const after = completed(await streamed(await replay(gw, first, key, { model: "gpt-5-codex", input })));
    bill = standinBill();
    expect(after.output_text).toBe(REPLY_WORDS.join(""));
    expect(bill.request.messages.at(-2).tool_calls).toEqual([
      { id: TOOL_CALL.id, type: "function", function: { name: `${namespace.name}__spawn_agent`, arguments: call.arguments } },
    ]);
    expect(bill.request.messages.at(-1)).toEqual({ role: "tool", tool_call_id: TOOL_CALL.id, content: "agent spawned" });
    charges.push(bill.charge);

    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - charges.reduce((a, b) => a + b), locked: 0 });
    await expectPgCharges(
      wallet,
      charges.map((amount_usdc) => ({ amount_usdc, model: CALLER })),
    );
  });
});

describe("Codex with its defaults (its default model's id; its tools in an additional_tools item, a custom exec tool)", () => {
  const cx = agentFixture("codex-default");
  const first = cx.get("first")!;
  const toolResult = cx.get("toolResult")!;
  const DEFAULT_MODEL = "gpt-6.2-sol";
  const declared = first.body.input.find((i: { type: string }) => i.type === "additional_tools").tools;
  // Every namespace's tools go up flat, `namespace__name`; the custom exec tool first, as Codex declares it.
  const flat = declared.flatMap((ns: any) => ns.tools.map((t: { name: string }) => `${ns.name}__${t.name}`));
  const exec = { type: "custom_tool_call", name: "exec", namespace: "functions" };
  const sentCall = toolResult.body.input.find((i: { type: string }) => i.type === "custom_tool_call");
  const sentOutput = toolResult.body.input.at(-1);

  test("its first request as sent: no tools field, no model set; the answer names its model, nothing is left out", () => {
    expect(first.body.model).toBe(DEFAULT_MODEL);
    expect(first.body.tools).toBeUndefined();
    expect(declared.map((t: { type: string }) => t.type)).toEqual(["namespace", "namespace", "namespace"]);
    expect(declared[0].tools[0]).toMatchObject({ type: "custom", name: "exec", format: { type: "grammar", syntax: "lark" } });
    expect(sentCall).toMatchObject(exec);
    expect(sentOutput).toMatchObject({ type: "custom_tool_call_output", call_id: sentCall.call_id });
  });

  test("OpenAI-type model by its default id: the custom tool a function of one string; its call back a custom_tool_call (stream and JSON), its output forward; exact charges", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const res = await replay(gw, first, key);
    expect(res.headers.get("x-tools-left-out")).toBeNull();
    const response = completed(await streamed(res));
    let bill = standinBill();
    expect(response.model).toBe(DEFAULT_MODEL);
    // The stand-in's fixed arguments are not the function form's {"input": …}: they come back as the input, whole.
    expect(response.output).toEqual([
      { id: expect.stringMatching(/^ctc_/), status: "completed", call_id: TOOL_CALL.id, ...exec, input: TOOL_CALL.arguments.join("") },
    ]);
    expect(bill.request.tools.map((t: any) => t.function.name)).toEqual(flat);
    expect(bill.request.tools[0].function).toMatchObject({
      name: "functions__exec",
      description: declared[0].tools[0].description,
      parameters: { type: "object", properties: { input: { type: "string" } }, required: ["input"], additionalProperties: false },
    });
    expect(bill.request.tools[0].function.parameters.properties.input.description).toContain(declared[0].tools[0].format.definition);
    expect(bill.request.messages.filter((m: { role: string }) => m.role === "system")).toHaveLength(4);
    const charges = [bill.charge];

    const json = await replay(gw, first, key, { stream: false });
    expect(json.status).toBe(200);
    expect(json.headers.get("x-tools-left-out")).toBeNull();
    const answer = await json.json();
    expect(answer.model).toBe(DEFAULT_MODEL);
    expect(answer.output).toEqual([response.output[0]].map((o) => ({ ...o, id: expect.stringMatching(/^ctc_/) })));
    charges.push(standinBill().charge);

    const after = completed(await streamed(await replay(gw, toolResult, key)));
    bill = standinBill();
    expect(after.output_text).toBe(REPLY_WORDS.join(""));
    expect(bill.request.messages.slice(-2)).toEqual([
      {
        role: "assistant",
        content: null,
        tool_calls: [
          {
            id: sentCall.call_id,
            type: "function",
            function: { name: "functions__exec", arguments: JSON.stringify({ input: sentCall.input }) },
          },
        ],
      },
      {
        role: "tool",
        tool_call_id: sentCall.call_id,
        content: sentOutput.output.map((p: { text: string }) => ({ type: "text", text: p.text })),
      },
    ]);
    charges.push(bill.charge);

    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - charges.reduce((a, b) => a + b), locked: 0 });
    await expectPgCharges(
      wallet,
      charges.map((amount_usdc) => ({ amount_usdc, model: CALLER })),
    );
  });

  test("Anthropic-type model: the custom tool a tool of one string input; a tool round trip; exact charges", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const res = await replay(gw, first, key, { model: SONNET });
    expect(res.headers.get("x-tools-left-out")).toBeNull();
    const response = completed(await streamed(res));
    let bill = claudeBill();
    expect(response.model).toBe(SONNET);
    expect(response.output.at(-1)).toMatchObject({ ...exec, call_id: TOOL_ID, input: TOOL_JSON.join("") });
    expect(bill.request.tools.map((t: { name: string }) => t.name)).toEqual(flat);
    expect(bill.request.tools[0].input_schema).toMatchObject({
      type: "object",
      properties: { input: { type: "string" } },
      required: ["input"],
    });
    const charges = [bill.charge];

    const after = completed(await streamed(await replay(gw, toolResult, key, { model: SONNET })));
    bill = claudeBill();
    expect(after.output_text).toBe(AFTER_TOOL.join(""));
    const turns = bill.request.messages.slice(-2);
    expect(turns[0].content).toEqual([
      { type: "tool_use", id: sentCall.call_id, name: "functions__exec", input: { input: sentCall.input } },
    ]);
    expect(turns[1].content[0]).toMatchObject({ type: "tool_result", tool_use_id: sentCall.call_id });
    charges.push(bill.charge);

    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - charges[0]! - charges[1]!, locked: 0 });
    await expectPgCharges(
      wallet,
      charges.map((amount_usdc) => ({ amount_usdc, model: SONNET })),
    );
  });

  test("stored: the next turn by previous_response_id sends only the tool's output; the stored additional_tools item still declares the tools; exact charges", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const response = completed(await streamed(await replay(gw, first, key, { store: true })));
    const call = response.output[0];
    expect(call).toMatchObject(exec);
    const charges = [standinBill().charge];

    const output = { type: "custom_tool_call_output", call_id: call.call_id, output: sentOutput.output };
    const after = completed(
      await streamed(await replay(gw, first, key, { store: true, previous_response_id: response.id, input: [output] })),
    );
    const bill = standinBill();
    expect(after.output_text).toBe(REPLY_WORDS.join(""));
    expect(bill.request.tools.map((t: any) => t.function.name)).toEqual(flat);
    expect(bill.request.messages.at(-2).tool_calls).toEqual([
      { id: call.call_id, type: "function", function: { name: "functions__exec", arguments: JSON.stringify({ input: call.input }) } },
    ]);
    charges.push(bill.charge);

    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - charges[0]! - charges[1]!, locked: 0 });
    await expectPgCharges(
      wallet,
      charges.map((amount_usdc) => ({ amount_usdc, model: CALLER })),
    );
  });
});

describe("opencode (chat completions by @ai-sdk/openai-compatible, /v1/messages by @ai-sdk/anthropic)", () => {
  const oc = agentFixture("opencode");

  test("chat completions, OpenAI-type model: its title request, then a tool round trip; exact charges", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const title = chatStream(await streamed(await replay(gw, oc.get("title")!, key)));
    expect(title.text).toBe(REPLY_WORDS.join(""));
    const charges = [standinBill().charge];

    const first = oc.get("first")!;
    const call = chatStream(await streamed(await replay(gw, first, key)));
    expect(call.model).toBe(CALLER);
    expect(call.calls.map((c: any) => c.function.name)).toEqual([first.body.tools[0].function.name]);
    charges.push(standinBill().charge);

    const after = chatStream(await streamed(await replay(gw, oc.get("toolResult")!, key)));
    const bill = standinBill();
    expect(after.text).toBe(REPLY_WORDS.join(""));
    expect(bill.request.messages.at(-1)).toMatchObject({ role: "tool" });
    charges.push(bill.charge);

    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - charges.reduce((a, b) => a + b), locked: 0 });
    await expectPgCharges(
      wallet,
      charges.map((amount_usdc) => ({ amount_usdc, model: CALLER })),
    );
  });

  test("/v1/messages (x-api-key, cache_control on blocks): a tool round trip to an Anthropic-type model, then to an OpenAI-type one; exact charges", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const first = oc.get("firstMessages")!;
    const charges: Charge[] = [];

    const call = messagesStream(await streamed(await replay(gw, first, key)));
    expect(call.tools).toEqual([{ type: "tool_use", id: TOOL_ID, name: first.body.tools[0].name, input: {} }]);
    charges.push({ amount_usdc: claudeBill().charge, model: SONNET });
    const after = messagesStream(await streamed(await replay(gw, oc.get("toolResultMessages")!, key)));
    expect(after.text).toBe(AFTER_TOOL.join(""));
    charges.push({ amount_usdc: claudeBill().charge, model: SONNET });

    const translated = messagesStream(await streamed(await replay(gw, first, key, { model: CALLER })));
    expect(translated.tools).toEqual([{ type: "tool_use", id: TOOL_CALL.id, name: first.body.tools[0].name, input: {} }]);
    charges.push({ amount_usdc: standinBill().charge, model: CALLER });
    const answered = messagesStream(await streamed(await replay(gw, oc.get("toolResultMessages")!, key, { model: CALLER })));
    expect(answered.text).toBe(REPLY_WORDS.join(""));
    charges.push({ amount_usdc: standinBill().charge, model: CALLER });

    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - charges.reduce((a, c) => a + c.amount_usdc, 0), locked: 0 });
    await expectPgCharges(wallet, charges);
  });
});

describe("Qwen Code (--auth-type openai: chat completions; openai-responses: /v1/responses)", () => {
  const qw = agentFixture("qwen-code");

  test("chat completions: a tool round trip to an OpenAI-type model, then to an Anthropic-type one (translated); exact charges", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const first = qw.get("first")!;
    const charges: Charge[] = [];

    const call = chatStream(await streamed(await replay(gw, first, key)));
    expect(call.calls.map((c: any) => c.function.name)).toEqual([first.body.tools[0].function.name]);
    charges.push({ amount_usdc: standinBill().charge, model: CALLER });
    const after = chatStream(await streamed(await replay(gw, qw.get("toolResult")!, key)));
    expect(after.text).toBe(REPLY_WORDS.join(""));
    charges.push({ amount_usdc: standinBill().charge, model: CALLER });

    const claude = chatStream(await streamed(await replay(gw, first, key, { model: SONNET })));
    expect(claude.calls.map((c: any) => c.function.name)).toEqual([first.body.tools[0].function.name]);
    charges.push({ amount_usdc: claudeBill().charge, model: SONNET });
    const answered = chatStream(await streamed(await replay(gw, qw.get("toolResult")!, key, { model: SONNET })));
    expect(answered.text).toBe(AFTER_TOOL.join(""));
    charges.push({ amount_usdc: claudeBill().charge, model: SONNET });

    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - charges.reduce((a, c) => a + c.amount_usdc, 0), locked: 0 });
    await expectPgCharges(wallet, charges);
  });

  test("/v1/responses: a tool round trip to an Anthropic-type model, then to an OpenAI-type one; exact charges", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const first = qw.get("firstResponses")!;
    const charges: Charge[] = [];

    let response = completed(await streamed(await replay(gw, first, key)));
    expect(response.output.at(-1)).toMatchObject({ type: "function_call", name: first.body.tools[0].name, call_id: TOOL_ID });
    charges.push({ amount_usdc: claudeBill().charge, model: SONNET });
    response = completed(await streamed(await replay(gw, qw.get("toolResultResponses")!, key)));
    expect(response.output_text).toBe(AFTER_TOOL.join(""));
    charges.push({ amount_usdc: claudeBill().charge, model: SONNET });

    response = completed(await streamed(await replay(gw, first, key, { model: CALLER })));
    expect(response.output.at(-1)).toMatchObject({ type: "function_call", name: first.body.tools[0].name, call_id: TOOL_CALL.id });
    charges.push({ amount_usdc: standinBill().charge, model: CALLER });
    response = completed(await streamed(await replay(gw, qw.get("toolResultResponses")!, key, { model: CALLER })));
    expect(response.output_text).toBe(REPLY_WORDS.join(""));
    charges.push({ amount_usdc: standinBill().charge, model: CALLER });

    expect(await gw.ledgerState(wallet)).toEqual({ balance: START - charges.reduce((a, c) => a + c.amount_usdc, 0), locked: 0 });
    await expectPgCharges(wallet, charges);
  });
});
