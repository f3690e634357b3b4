/**
 * POST /v1/responses driven by the clients that speak it by default — the openai SDK (responses.create, streamed
 * and not, responses.stream()), the Vercel AI SDK's default provider, LangChain with useResponsesApi — unmodified
 * but for base URL, key and fetch, against an OpenAI-type ("standin/…") and an Anthropic-type ("claude/…") stand-in:
 * the text, the usage and the exact charge, tool round trips and conversations continued from the store.
 */
import type { Redis } from "ioredis";
import { describe, expect, test } from "bun:test";
import { createOpenAI } from "@ai-sdk/openai";
import { ChatOpenAI } from "@langchain/openai";
import { generateText, streamText } from "ai";
import { AFTER_TOOL, inputTokensFor, REPLY, TOOL_INTRO, TOOL_JSON } from "./helpers/anthropicStandin.ts";
import { BASE, expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { LONG_TOOL, LONG_WORDS, REPLY_WORDS } from "./helpers/openaiStandin.ts";
import { newId } from "../src/providers/responses/wire.ts";

const gw = sharedGateway();

const ECHO = "standin/echo";
const SONNET = "claude/claude-sonnet-4-5";
const weatherTool = {
  type: "function" as const,
  name: "get_weather",
  description: "Current weather of a city",
  parameters: { type: "object", properties: { city: { type: "string" }, unit: { type: "string" } }, required: ["city"] },
  strict: false,
};

/** What each stand-in bills for its last request: the text it answers and the usage it reports. */
const MODELS = {
  [ECHO]: {
    reply: REPLY_WORDS.join(""),
    usage: () => ({ input: 10 * (gw.standin.requests.at(-1)!.messages as unknown[]).length + 1, output: REPLY_WORDS.length }),
  },
  [SONNET]: { reply: REPLY.join(""), usage: () => ({ input: inputTokensFor(gw.anthropic.requests.at(-1)!), output: REPLY.length }) },
} as const;

const aiProvider = (key: string) => createOpenAI({ baseURL: `${BASE}/v1`, apiKey: key, fetch: gw.fetch });

async function charged(wallet: string, input: number, output: number) {
  expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - expectedCharge(input, output), locked: 0 });
}

for (const model of [ECHO, SONNET] as const) {
  const m = MODELS[model];
  describe(`responses via ${model}`, () => {
    test("openai SDK responses.create: text, usage, exact charge", async () => {
      const { wallet, key } = await gw.newWallet(10);
      const r = await gw
        .openai(key)
        .responses.create({ model, instructions: "You are terse.", input: "Say hello.", max_output_tokens: 100 });
      const { input, output } = m.usage();
      expect(r.object).toBe("response");
      expect(r.status).toBe("completed");
      expect(r.output_text).toBe(m.reply);
      expect(r.output).toHaveLength(1);
      expect(r.output[0]).toMatchObject({
        type: "message",
        role: "assistant",
        status: "completed",
        content: [{ type: "output_text", text: m.reply, annotations: [] }],
      });
      expect(r.usage).toEqual({
        input_tokens: input,
        input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
        output_tokens: output,
        output_tokens_details: { reasoning_tokens: 0 },
        total_tokens: input + output,
        ...({ charge_usdc: expectedCharge(input, output) } as {}),
      });
      await charged(wallet, input, output);
    });

    test("openai SDK create({stream: true}): event sequence, text, usage on response.completed, exact charge", async () => {
      const { wallet, key } = await gw.newWallet(10);
      const stream = await gw.openai(key).responses.create({ model, input: "Say hello.", stream: true });
      const types: string[] = [];
      const seqs: number[] = [];
      let text = "";
      let completed: any;
      for await (const e of stream) {
        types.push(e.type);
        seqs.push(e.sequence_number);
        if (e.type === "response.output_text.delta") text += e.delta;
        if (e.type === "response.completed") completed = e.response;
      }
      expect(text).toBe(m.reply);
      expect(seqs).toEqual(seqs.map((_, i) => i));
      expect(types.slice(0, 4)).toEqual([
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
      ]);
      expect(types.slice(-4)).toEqual([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
      ]);
      expect(types.filter((t) => t === "response.output_text.delta")).toHaveLength(model === ECHO ? REPLY_WORDS.length : REPLY.length);
      const { input, output } = m.usage();
      expect(completed.usage).toMatchObject({ input_tokens: input, output_tokens: output, total_tokens: input + output });
      expect(completed.output[0].content[0].text).toBe(m.reply);
      await charged(wallet, input, output);
    });

    test("openai SDK responses.stream().finalResponse(): the strict accumulator takes the events", async () => {
      const { wallet, key } = await gw.newWallet(10);
      const final = await gw.openai(key).responses.stream({ model, input: "Say hello." }).finalResponse();
      expect(final.status).toBe("completed");
      expect(final.output_text).toBe(m.reply);
      const { input, output } = m.usage();
      expect(final.usage?.total_tokens).toBe(input + output);
      await charged(wallet, input, output);
    });

    test("previous_response_id continues the stored conversation (instructions not carried over)", async () => {
      const { wallet, key } = await gw.newWallet(10);
      const client = gw.openai(key);
      const r1 = await client.responses.create({ model, instructions: "You are terse.", input: "Say hello." });
      const first = m.usage();
      const r2 = await client.responses.create({ model, previous_response_id: r1.id, input: "Again." });
      expect(r2.output_text).toBe(m.reply);
      expect(r2.previous_response_id).toBe(r1.id);
      const upstream = model === ECHO ? gw.standin.requests.at(-1)! : gw.anthropic.requests.at(-1)!;
      // The first turn's instructions are not carried over (OpenAI's rule): no system message upstream.
      expect(upstream.messages).toEqual([
        { role: "user", content: "Say hello." },
        { role: "assistant", content: m.reply },
        { role: "user", content: "Again." },
      ]);
      expect(upstream.system).toBeUndefined();
      const second = m.usage();
      expect(r2.usage?.input_tokens).toBe(second.input);
      expect(await gw.ledgerState(wallet)).toEqual({
        balance: 10_000_000 - expectedCharge(first.input, first.output) - expectedCharge(second.input, second.output),
        locked: 0,
      });
    });

    test("an item_reference resolves to the stored output item", async () => {
      const { key } = await gw.newWallet(10);
      const client = gw.openai(key);
      const r1 = await client.responses.create({ model, input: "Say hello." });
      await client.responses.create({
        model,
        input: [
          { role: "user", content: "Say hello." },
          { type: "item_reference", id: r1.output[0]!.id! },
          { role: "user", content: "Again." },
        ],
      });
      const upstream = model === ECHO ? gw.standin.requests.at(-1)! : gw.anthropic.requests.at(-1)!;
      expect(upstream.messages).toEqual([
        { role: "user", content: "Say hello." },
        { role: "assistant", content: m.reply },
        { role: "user", content: "Again." },
      ]);
    });

    test("AI SDK default provider: generateText and streamText, text and usage, exact charge", async () => {
      const { wallet, key } = await gw.newWallet(10);
      const provider = aiProvider(key);
      const g = await generateText({ model: provider(model), prompt: "Say hello.", maxRetries: 0 });
      expect(g.text).toBe(m.reply);
      const one = m.usage();
      expect(g.usage).toMatchObject({ inputTokens: one.input, outputTokens: one.output, totalTokens: one.input + one.output });
      const s = streamText({ model: provider(model), prompt: "Say hello.", maxRetries: 0 });
      expect(await s.text).toBe(m.reply);
      const two = m.usage();
      expect(await s.usage).toMatchObject({ inputTokens: two.input, outputTokens: two.output });
      expect(await gw.ledgerState(wallet)).toEqual({
        balance: 10_000_000 - expectedCharge(one.input, one.output) - expectedCharge(two.input, two.output),
        locked: 0,
      });
    });

    test("AI SDK second turn: the earlier answer goes back as an item_reference and resolves", async () => {
      const { key } = await gw.newWallet(10);
      const sent: any[] = [];
      const recording = ((url: string, init: RequestInit) => (
        sent.push(JSON.parse(String(init.body))),
        gw.fetch(url, init)
      )) as typeof fetch;
      const provider = createOpenAI({ baseURL: `${BASE}/v1`, apiKey: key, fetch: recording });
      const g = await generateText({ model: provider(model), prompt: "Say hello.", maxRetries: 0 });
      const again = await generateText({
        model: provider(model),
        messages: [{ role: "user", content: "Say hello." }, ...g.response.messages, { role: "user", content: "Again." }],
        maxRetries: 0,
      });
      expect(again.text).toBe(m.reply);
      const upstream = model === ECHO ? gw.standin.requests.at(-1)! : gw.anthropic.requests.at(-1)!;
      expect(sent[1].input[1]).toEqual({ type: "item_reference", id: expect.stringMatching(/^msg_[0-9a-f]{48}$/) });
      expect(upstream.messages).toMatchObject([{ role: "user" }, { role: "assistant", content: m.reply }, { role: "user" }]);
    });

    test("LangChain ChatOpenAI with useResponsesApi: invoke and stream, usage, exact charge", async () => {
      const { wallet, key } = await gw.newWallet(10);
      const llm = new ChatOpenAI({
        model,
        apiKey: key,
        useResponsesApi: true,
        maxRetries: 0,
        configuration: { baseURL: `${BASE}/v1`, fetch: gw.fetch },
      });
      const answer = await llm.invoke("Say hello.");
      expect(answer.text).toBe(m.reply);
      const one = m.usage();
      expect(answer.usage_metadata).toMatchObject({
        input_tokens: one.input,
        output_tokens: one.output,
        total_tokens: one.input + one.output,
      });
      let streamed = "";
      for await (const chunk of await llm.stream("Say hello.")) streamed += chunk.text;
      expect(streamed).toBe(m.reply);
      const two = m.usage();
      expect(await gw.ledgerState(wallet)).toEqual({
        balance: 10_000_000 - expectedCharge(one.input, one.output) - expectedCharge(two.input, two.output),
        locked: 0,
      });
    });
  });
}

describe("a next turn that arrives before its conversation's write", () => {
  // An answer leaves without waiting for its conversation's write; a next turn sent to another process at once can
  // read first. Here the write is made to land only after the next turn's first read (seen on MONITOR).
  test("reads the fresh id again and finds it: the whole conversation goes upstream", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const id = newId("resp");
    const names = gw.services.ledger.names;
    const stored = names.storedResponse(names.shardOf(wallet), wallet, id);
    const monitor = await (gw.services.redis as Redis).monitor();
    try {
      const firstRead = new Promise<void>((resolve) =>
        monitor.on("monitor", (_time: string, args: string[]) => {
          if (args[0]?.toUpperCase() === "GET" && args[1] === stored) resolve();
        }),
      );
      const next = gw.openai(key).responses.create({ model: ECHO, previous_response_id: id, input: "Go on." });
      await firstRead;
      const earlier = [
        { role: "user", content: "Turn 0." },
        { id: newId("msg"), type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Earlier." }] },
      ];
      await gw.services.redis.set(stored, JSON.stringify(earlier), "EX", 60);
      expect((await next).output_text).toBe(MODELS[ECHO].reply);
      expect(gw.standin.requests.at(-1)!.messages).toEqual([
        { role: "user", content: "Turn 0." },
        { role: "assistant", content: "Earlier." },
        { role: "user", content: "Go on." },
      ]);
      const { input, output } = MODELS[ECHO].usage();
      await charged(wallet, input, output);
    } finally {
      monitor.disconnect();
    }
  });
});

describe("function tool round trip (Anthropic-type model: its stand-in calls the tool)", () => {
  const callArgs = JSON.parse(TOOL_JSON.join(""));

  test("openai SDK: function_call item, then previous_response_id + function_call_output", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const client = gw.openai(key);
    const r1 = await client.responses.create({ model: SONNET, input: "Weather in Paris?", tools: [weatherTool] });
    const p1 = inputTokensFor(gw.anthropic.requests.at(-1)!);
    expect(r1.output_text).toBe(TOOL_INTRO.join(""));
    const call = r1.output.find((i) => i.type === "function_call")!;
    expect(call).toMatchObject({ type: "function_call", name: "get_weather", status: "completed" });
    expect(JSON.parse((call as { arguments: string }).arguments)).toEqual(callArgs);
    const upTools = gw.anthropic.requests.at(-1)!.tools as { name: string }[];
    expect(upTools.map((t) => t.name)).toEqual(["get_weather"]);

    const r2 = await client.responses.create({
      model: SONNET,
      previous_response_id: r1.id,
      tools: [weatherTool],
      input: [{ type: "function_call_output", call_id: (call as { call_id: string }).call_id, output: '{"temp": 21}' }],
    });
    const p2 = inputTokensFor(gw.anthropic.requests.at(-1)!);
    expect(r2.output_text).toBe(AFTER_TOOL.join(""));
    const o1 = TOOL_INTRO.length + TOOL_JSON.length;
    expect(r1.usage?.output_tokens).toBe(o1);
    expect(await gw.ledgerState(wallet)).toEqual({
      balance: 10_000_000 - expectedCharge(p1, o1) - expectedCharge(p2, AFTER_TOOL.length),
      locked: 0,
    });
  });

  test("openai SDK streamed: function_call events and the call on response.completed", async () => {
    const { key } = await gw.newWallet(10);
    const final = await gw
      .openai(key)
      .responses.stream({ model: SONNET, input: "Weather in Paris?", tools: [weatherTool] })
      .finalResponse();
    const call = final.output.find((i) => i.type === "function_call") as { name: string; arguments: string } | undefined;
    expect(call?.name).toBe("get_weather");
    expect(JSON.parse(call!.arguments)).toEqual(callArgs);
    expect(final.output_text).toBe(TOOL_INTRO.join(""));
  });

  test("AI SDK generateText tool loop (two steps, streamed and not)", async () => {
    const { key } = await gw.newWallet(10);
    const { tool, stepCountIs, jsonSchema } = await import("ai");
    const tools = {
      get_weather: tool({
        description: "weather",
        inputSchema: jsonSchema<{ city: string }>(weatherTool.parameters as any),
        execute: async () => ({ temp: 21 }),
      }),
    };
    const g = await generateText({
      model: aiProvider(key)(SONNET),
      prompt: "Weather in Paris?",
      tools,
      stopWhen: stepCountIs(2),
      maxRetries: 0,
    });
    expect(g.steps).toHaveLength(2);
    expect(g.steps[0]!.toolCalls[0]).toMatchObject({ toolName: "get_weather", input: callArgs });
    expect(g.text).toBe(AFTER_TOOL.join(""));
    const s = streamText({ model: aiProvider(key)(SONNET), prompt: "Weather in Paris?", tools, stopWhen: stepCountIs(2), maxRetries: 0 });
    expect(await s.text).toBe(AFTER_TOOL.join(""));
  });
});

describe("function tool round trip (OpenAI-type model: its stand-in calls the tool and reports no usage)", () => {
  const recordTool = { type: "function" as const, name: LONG_TOOL.name, parameters: { type: "object", properties: {} }, strict: false };
  const callArgs = JSON.parse(LONG_TOOL.arguments.join(""));

  test("openai SDK, streamed then JSON: function_call item, then previous_response_id + function_call_output; counted usage charged", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const client = gw.openai(key);
    const r1 = await client.responses.stream({ model: "standin/no-usage-long", input: "Record it.", tools: [recordTool] }).finalResponse();
    expect(r1.status).toBe("completed");
    expect(r1.output_text).toBe(LONG_WORDS.join(""));
    const call = r1.output.find((i) => i.type === "function_call") as { name: string; arguments: string; call_id: string };
    expect(call).toMatchObject({ type: "function_call", name: LONG_TOOL.name, call_id: LONG_TOOL.id, status: "completed" });
    expect(JSON.parse(call.arguments)).toEqual(callArgs);
    expect((gw.standin.requests.at(-1)!.tools as { function: { name: string } }[]).map((t) => t.function.name)).toEqual([LONG_TOOL.name]);
    // The provider reported no usage: the answer carries the counted usage it was billed at.
    const u1 = r1.usage!;
    expect(u1.output_tokens).toBeGreaterThan(100);
    const firstCharge = expectedCharge(u1.input_tokens, u1.output_tokens);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - firstCharge, locked: 0 });

    const r2 = await client.responses.create({
      model: ECHO,
      previous_response_id: r1.id,
      tools: [recordTool],
      input: [{ type: "function_call_output", call_id: call.call_id, output: "saved" }],
    });
    expect(gw.standin.requests.at(-1)!.messages).toEqual([
      { role: "user", content: "Record it." },
      {
        role: "assistant",
        content: LONG_WORDS.join(""),
        tool_calls: [{ id: LONG_TOOL.id, type: "function", function: { name: LONG_TOOL.name, arguments: call.arguments } }],
      },
      { role: "tool", tool_call_id: LONG_TOOL.id, content: "saved" },
    ]);
    expect(r2.output_text).toBe(REPLY_WORDS.join(""));
    expect(r2.usage).toMatchObject({ input_tokens: 31, output_tokens: REPLY_WORDS.length });
    expect(await gw.ledgerState(wallet)).toEqual({
      balance: 10_000_000 - firstCharge - expectedCharge(31, REPLY_WORDS.length),
      locked: 0,
    });
  });
});
