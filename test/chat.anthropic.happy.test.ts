import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { parseCatalog } from "../src/providers/catalog.ts";
import { AFTER_TOOL, inputTokensFor, REPLY, SIGNATURE, THINKING, TOOL_ID, TOOL_INTRO, TOOL_JSON } from "./helpers/anthropicStandin.ts";
import { expectedCharge, sharedGateway } from "./helpers/gateway.ts";

const gw = sharedGateway();

const SONNET = "claude/claude-sonnet-4-5";
const messages = [
  { role: "system" as const, content: "You are terse." },
  { role: "user" as const, content: "Say hello." },
];
const weatherTool = {
  type: "function" as const,
  function: {
    name: "get_weather",
    description: "Current weather of a city",
    parameters: { type: "object", properties: { city: { type: "string" }, unit: { type: "string" } }, required: ["city"] },
  },
};

/** The last request the Anthropic stand-in received, and the usage it reported for it. */
function lastUpstream() {
  const request = gw.anthropic.requests.at(-1)!;
  return { request, prompt: inputTokensFor(request) };
}

async function pgCharges(wallet: string) {
  return [
    ...(await gw.services.sql<
      { amount_usdc: number; prompt_tokens: number; completion_tokens: number; api_key_id: number; model: string }[]
    >`
    SELECT amount_usdc, prompt_tokens, completion_tokens, api_key_id, model FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge'
    ORDER BY occurred_at`),
  ];
}

/** Fields the gateway accepts beyond the SDK's types (thinking, thinking_blocks); the SDK sends them as they are. */
const extension = (fields: Record<string, unknown>) => fields as {};

/** Reads a raw SSE body into its data payloads. */
async function ssePayloads(res: Response): Promise<string[]> {
  const text = await res.text();
  return text
    .split("\n\n")
    .filter(Boolean)
    .map((e) => e.replace(/^data: /, ""));
}

describe("Anthropic through the openai SDK: text", () => {
  test("non-streaming: translated request and answer, exact charge in Redis and Postgres", async () => {
    const { wallet, key, keyId } = await gw.newWallet(10);
    const completion = await gw.openai(key).chat.completions.create({ model: SONNET, messages, max_tokens: 100 });

    expect(completion.object).toBe("chat.completion");
    expect(completion.choices).toEqual([
      { index: 0, message: { role: "assistant", content: REPLY.join(""), refusal: null }, logprobs: null, finish_reason: "stop" },
    ]);
    const { request, prompt } = lastUpstream();
    expect(completion.usage).toEqual({
      prompt_tokens: prompt,
      completion_tokens: REPLY.length,
      total_tokens: prompt + REPLY.length,
      ...extension({ charge_usdc: expectedCharge(prompt, REPLY.length) }),
    });
    // The Messages API request: system lifted out of the messages, upstream model name, clamped max_tokens.
    expect(request).toEqual({
      model: "claude-sonnet-4-5",
      max_tokens: 100,
      messages: [{ role: "user", content: "Say hello." }],
      system: [{ type: "text", text: "You are terse." }],
    });
    expect(gw.anthropic.headers.at(-1)).toEqual({ "x-api-key": "standin-key", "anthropic-version": "2023-06-01", authorization: null });

    const charge = expectedCharge(prompt, REPLY.length);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charge, locked: 0 });
    await gw.services.flusher.drain();
    expect(await pgCharges(wallet)).toEqual([
      { amount_usdc: charge, prompt_tokens: prompt, completion_tokens: REPLY.length, api_key_id: keyId, model: SONNET },
    ]);
  });

  test("streaming without include_usage: text arrives, no usage chunk, exact charge", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const stream = await gw.openai(key).chat.completions.create({ model: SONNET, messages, stream: true });
    let text = "";
    let finish: string | null = null;
    let sawUsage = false;
    for await (const chunk of stream) {
      expect(chunk.object).toBe("chat.completion.chunk");
      text += chunk.choices[0]?.delta?.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) sawUsage = true;
    }
    expect(text).toBe(REPLY.join(""));
    expect(finish).toBe("stop");
    expect(sawUsage).toBe(false);
    const { request, prompt } = lastUpstream();
    expect(request.stream).toBe(true);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - expectedCharge(prompt, REPLY.length), locked: 0 });
  });

  test("streaming with include_usage: the final chunk carries the provider's usage", async () => {
    const { wallet, key, keyId } = await gw.newWallet(10);
    const stream = await gw.openai(key).chat.completions.create({
      model: SONNET,
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const { prompt } = lastUpstream();
    expect(chunks.at(-1)!.choices).toEqual([]);
    expect(chunks.at(-1)!.usage).toEqual({
      prompt_tokens: prompt,
      completion_tokens: REPLY.length,
      total_tokens: prompt + REPLY.length,
      ...extension({ charge_usdc: expectedCharge(prompt, REPLY.length) }),
    });
    const charge = expectedCharge(prompt, REPLY.length);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charge, locked: 0 });
    await gw.services.flusher.drain();
    expect(await pgCharges(wallet)).toEqual([
      { amount_usdc: charge, prompt_tokens: prompt, completion_tokens: REPLY.length, api_key_id: keyId, model: SONNET },
    ]);
  });

  test("the raw stream: role chunk first, OpenAI chunks only (no event: lines, no pings), one [DONE] at the end", async () => {
    const { key } = await gw.newWallet(10);
    const res = await gw.handle(
      new Request("https://gateway.test/v1/chat/completions", {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: SONNET, messages, stream: true }),
      }),
    );
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    const payloads = await ssePayloads(res);
    expect(payloads.at(-1)).toBe("[DONE]");
    expect(payloads.filter((p) => p === "[DONE]")).toHaveLength(1);
    const chunks = payloads.slice(0, -1).map((p) => JSON.parse(p));
    expect(chunks[0]).toMatchObject({
      id: "msg_01StandinMessage",
      object: "chat.completion.chunk",
      model: "claude/claude-sonnet-4-5", // the id the client asked for, not the upstream name
      choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }],
    });
    expect(chunks.map((c) => c.choices[0].delta.content ?? "").join("")).toBe(REPLY.join(""));
    expect(chunks.at(-1).choices[0]).toEqual({ index: 0, delta: {}, logprobs: null, finish_reason: "stop" });
  });

  test("stop → stop_sequences, finish_reason stop; a small max_tokens → finish_reason length", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const client = gw.openai(key);
    const stopped = await client.chat.completions.create({ model: SONNET, messages, stop: ["stand"] });
    expect(lastUpstream().request.stop_sequences).toEqual(["stand"]);
    expect(stopped.choices[0]!.message.content).toBe("Hi from the Claude");
    expect(stopped.choices[0]!.finish_reason).toBe("stop");
    const first = expectedCharge(lastUpstream().prompt, 4);

    const cut = await client.chat.completions.create({ model: SONNET, messages, max_tokens: 2, stop: "never" });
    expect(lastUpstream().request).toMatchObject({ max_tokens: 2, stop_sequences: ["never"] });
    expect(cut.choices[0]!.message.content).toBe("Hi from");
    expect(cut.choices[0]!.finish_reason).toBe("length");
    expect(cut.usage!.completion_tokens).toBe(2);
    const second = expectedCharge(lastUpstream().prompt, 2);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - first - second, locked: 0 });
  });

  test("system and developer messages anywhere join the system prompt; consecutive user turns merge", async () => {
    const { key } = await gw.newWallet(10);
    await gw.openai(key).chat.completions.create({
      model: SONNET,
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: "One." },
        { role: "developer", content: [{ type: "text", text: "Answer in English." }] },
        { role: "user", content: [{ type: "text", text: "Two." }] },
        { role: "assistant", content: "Noted." },
        { role: "user", content: "Three." },
      ],
      temperature: 1.5,
      top_p: 0.9,
      user: "user-42",
    });
    expect(lastUpstream().request).toEqual({
      model: "claude-sonnet-4-5",
      max_tokens: 1024,
      system: [
        { type: "text", text: "Be brief." },
        { type: "text", text: "Answer in English." },
      ],
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: "One." },
            { type: "text", text: "Two." },
          ],
        },
        { role: "assistant", content: "Noted." },
        { role: "user", content: "Three." },
      ],
      // OpenAI's 0–2 temperature clamped to Anthropic's 0–1
      temperature: 1,
      top_p: 0.9,
      metadata: { user_id: "user-42" },
    });
  });
});

describe("Anthropic through the openai SDK: tool calls", () => {
  const args = JSON.stringify(JSON.parse(TOOL_JSON.join("")));

  test("non-streaming: tools and tool_choice translated, tool_use back as tool_calls, then the tool result turn", async () => {
    const { wallet, key, keyId } = await gw.newWallet(10);
    const client = gw.openai(key);
    const ask = [{ role: "user" as const, content: "Weather in Paris?" }];
    const first = await client.chat.completions.create({
      model: SONNET,
      messages: ask,
      tools: [weatherTool],
      tool_choice: "required",
      parallel_tool_calls: false,
    });
    const one = lastUpstream();
    expect(one.request.tools).toEqual([
      { name: "get_weather", description: "Current weather of a city", input_schema: weatherTool.function.parameters },
    ]);
    expect(one.request.tool_choice).toEqual({ type: "any", disable_parallel_tool_use: true });
    expect(first.choices[0]).toEqual({
      index: 0,
      message: {
        role: "assistant",
        content: TOOL_INTRO.join(""),
        refusal: null,
        tool_calls: [{ id: TOOL_ID, type: "function", function: { name: "get_weather", arguments: args } }],
      },
      logprobs: null,
      finish_reason: "tool_calls",
    });
    const firstOut = TOOL_INTRO.length + TOOL_JSON.length;
    expect(first.usage!.completion_tokens).toBe(firstOut);

    const second = await client.chat.completions.create({
      model: SONNET,
      messages: [...ask, first.choices[0]!.message, { role: "tool", tool_call_id: TOOL_ID, content: '{"sky": "sunny"}' }],
      tools: [weatherTool],
      tool_choice: { type: "function", function: { name: "get_weather" } },
    });
    const two = lastUpstream();
    expect(two.request.messages).toEqual([
      { role: "user", content: "Weather in Paris?" },
      {
        role: "assistant",
        content: [
          { type: "text", text: TOOL_INTRO.join("") },
          { type: "tool_use", id: TOOL_ID, name: "get_weather", input: { city: "Paris", unit: "celsius" } },
        ],
      },
      { role: "user", content: [{ type: "tool_result", tool_use_id: TOOL_ID, content: '{"sky": "sunny"}' }] },
    ]);
    expect(two.request.tool_choice).toEqual({ type: "tool", name: "get_weather" });
    expect(second.choices[0]!.message.content).toBe(AFTER_TOOL.join(""));
    expect(second.choices[0]!.finish_reason).toBe("stop");

    const charge1 = expectedCharge(one.prompt, firstOut);
    const charge2 = expectedCharge(two.prompt, AFTER_TOOL.length);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charge1 - charge2, locked: 0 });
    await gw.services.flusher.drain();
    expect(await pgCharges(wallet)).toEqual([
      { amount_usdc: charge1, prompt_tokens: one.prompt, completion_tokens: firstOut, api_key_id: keyId, model: SONNET },
      { amount_usdc: charge2, prompt_tokens: two.prompt, completion_tokens: AFTER_TOOL.length, api_key_id: keyId, model: SONNET },
    ]);
  });

  test("streaming: input_json_delta becomes tool-call argument deltas the SDK reassembles", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const stream = await gw.openai(key).chat.completions.create({
      model: SONNET,
      messages: [{ role: "user", content: "Weather in Paris?" }],
      tools: [weatherTool],
      stream: true,
    });
    let text = "";
    let finish: string | null = null;
    const calls: { id?: string; name?: string; arguments: string }[] = [];
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta;
      text += delta?.content ?? "";
      for (const c of delta?.tool_calls ?? []) {
        calls[c.index] ??= { arguments: "" };
        if (c.id) calls[c.index]!.id = c.id;
        if (c.function?.name) calls[c.index]!.name = c.function.name;
        calls[c.index]!.arguments += c.function?.arguments ?? "";
      }
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(text).toBe(TOOL_INTRO.join(""));
    expect(calls).toEqual([{ id: TOOL_ID, name: "get_weather", arguments: TOOL_JSON.join("") }]);
    expect(finish).toBe("tool_calls");
    expect(lastUpstream().request.tool_choice).toBeUndefined();
    const charge = expectedCharge(lastUpstream().prompt, TOOL_INTRO.length + TOOL_JSON.length);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charge, locked: 0 });
  });
});

describe("Anthropic through the openai SDK: thinking and reasoning_effort", () => {
  test("thinking with budget_tokens: forwarded, temperature dropped, reasoning and signature back; charged exactly", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const completion = await gw.openai(key).chat.completions.create({
      model: SONNET,
      messages,
      max_tokens: 4096,
      temperature: 0.3,
      ...extension({ thinking: { type: "enabled", budget_tokens: 2048 } }),
    });
    const { request, prompt } = lastUpstream();
    expect(request.thinking).toEqual({ type: "enabled", budget_tokens: 2048 });
    expect(request.temperature).toBeUndefined();
    const message = completion.choices[0]!.message as unknown as Record<string, unknown>;
    expect(message.content).toBe(REPLY.join(""));
    expect(message.reasoning_content).toBe(THINKING.join(""));
    expect(message.thinking_blocks).toEqual([{ type: "thinking", thinking: THINKING.join(""), signature: SIGNATURE }]);
    const out = THINKING.length + REPLY.length;
    expect(completion.usage!.completion_tokens).toBe(out);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - expectedCharge(prompt, out), locked: 0 });
  });

  test("thinking streamed: reasoning_content deltas, the signature in thinking_blocks, then the text", async () => {
    const { wallet, key, keyId } = await gw.newWallet(10);
    const stream = await gw.openai(key).chat.completions.create({
      model: SONNET,
      messages,
      max_tokens: 4096,
      stream: true,
      stream_options: { include_usage: true },
      ...extension({ thinking: { type: "enabled", budget_tokens: 1024 } }),
    });
    let reasoning = "";
    let text = "";
    let signature = "";
    let usage;
    for await (const chunk of stream) {
      const delta = (chunk.choices[0]?.delta ?? {}) as Record<string, any>;
      reasoning += delta.reasoning_content ?? "";
      text += delta.content ?? "";
      for (const b of delta.thinking_blocks ?? []) signature += b.signature ?? "";
      if (chunk.usage) usage = chunk.usage;
    }
    expect(reasoning).toBe(THINKING.join(""));
    expect(signature).toBe(SIGNATURE);
    expect(text).toBe(REPLY.join(""));
    const { prompt } = lastUpstream();
    const out = THINKING.length + REPLY.length;
    const charge = expectedCharge(prompt, out);
    expect(usage).toEqual({
      prompt_tokens: prompt,
      completion_tokens: out,
      total_tokens: prompt + out,
      ...extension({ charge_usdc: charge }),
    });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charge, locked: 0 });
    await gw.services.flusher.drain();
    expect(await pgCharges(wallet)).toEqual([
      { amount_usdc: charge, prompt_tokens: prompt, completion_tokens: out, api_key_id: keyId, model: SONNET },
    ]);
  });

  test("thinking_blocks of an earlier answer go back to Anthropic with the assistant turn", async () => {
    const { key } = await gw.newWallet(10);
    await gw.openai(key).chat.completions.create({
      model: SONNET,
      max_tokens: 4096,
      ...extension({ thinking: { type: "enabled", budget_tokens: 1024 } }),
      messages: [
        { role: "user", content: "Weather in Paris?" },
        {
          role: "assistant",
          content: null,
          ...extension({ thinking_blocks: [{ type: "thinking", thinking: "I should call the tool.", signature: SIGNATURE }] }),
          tool_calls: [{ id: TOOL_ID, type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }],
        },
        { role: "tool", tool_call_id: TOOL_ID, content: "sunny" },
      ],
      tools: [weatherTool],
    });
    expect(lastUpstream().request.messages[1]).toEqual({
      role: "assistant",
      content: [
        { type: "thinking", thinking: "I should call the tool.", signature: SIGNATURE },
        { type: "tool_use", id: TOOL_ID, name: "get_weather", input: { city: "Paris" } },
      ],
    });
  });

  test("reasoning_effort: a share of max_tokens as budget, adaptive effort from 4.6 on, nothing where it cannot apply", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const client = gw.openai(key);
    const cases: [string, Record<string, unknown>, Record<string, unknown>][] = [
      // budget models: low/medium/high = 20/50/80 % of max_tokens, at least 1,024
      ["claude/claude-sonnet-4-5", { reasoning_effort: "high", max_tokens: 4096 }, { thinking: { type: "enabled", budget_tokens: 3276 } }],
      ["claude/claude-sonnet-4-5", { reasoning_effort: "low", max_tokens: 4096 }, { thinking: { type: "enabled", budget_tokens: 1024 } }],
      // a max_tokens that cannot hold the smallest budget: no thinking rather than a larger hold
      ["claude/claude-sonnet-4-5", { reasoning_effort: "high", max_tokens: 1024 }, { thinking: undefined }],
      // 4.6: the adaptive form with the effort level
      ["claude/claude-sonnet-4-6", { reasoning_effort: "medium" }, { thinking: { type: "adaptive" }, output_config: { effort: "medium" } }],
      // 4.7: adaptive only and no sampling parameters
      [
        "claude/claude-opus-4-7",
        { reasoning_effort: "minimal", temperature: 0.2, top_p: 0.5 },
        { thinking: { type: "adaptive" }, output_config: { effort: "low" }, temperature: undefined, top_p: undefined },
      ],
      [
        "claude/claude-opus-4-7",
        { thinking: { type: "enabled", budget_tokens: 2000 }, max_tokens: 4096 },
        { thinking: { type: "adaptive" } },
      ],
      ["claude/claude-opus-4-7", { temperature: 0.2 }, { temperature: undefined, thinking: undefined }],
      // a client's own budget above the model's maximum output (Claude Code's 31,999 of 32,000): lowered under the
      // max_tokens that goes, or no thinking where even the smallest does not fit
      [
        "claude/claude-sonnet-4-5",
        { thinking: { type: "enabled", budget_tokens: 31999 }, max_tokens: 32000 },
        { max_tokens: 4096, thinking: { type: "enabled", budget_tokens: 4095 } },
      ],
      ["claude/claude-sonnet-4-5", { thinking: { type: "enabled", budget_tokens: 1024 }, max_tokens: 1024 }, { thinking: undefined }],
      // 3.5: no thinking at all; "none" and disabled send nothing
      [
        "claude/claude-3-5-haiku",
        { reasoning_effort: "high", max_tokens: 4096, temperature: 0.2 },
        { thinking: undefined, temperature: 0.2 },
      ],
      ["claude/claude-sonnet-4-5", { reasoning_effort: "none" }, { thinking: undefined }],
      ["claude/claude-sonnet-4-5", { thinking: { type: "disabled" }, reasoning_effort: "high", max_tokens: 4096 }, { thinking: undefined }],
      // an effort named like a built-in property is unknown, not Object.prototype's
      [
        "claude/claude-sonnet-4-6",
        { reasoning_effort: "constructor", max_tokens: 4096 },
        { thinking: undefined, output_config: undefined },
      ],
      ["claude/claude-sonnet-4-5", { reasoning_effort: "toString", max_tokens: 4096 }, { thinking: undefined }],
    ];
    let charged = 0;
    for (const [model, extra, upstream] of cases) {
      const completion = await client.chat.completions.create({ model, messages, ...extra } as never);
      const { request, prompt } = lastUpstream();
      for (const [k, v] of Object.entries(upstream)) expect([model, k, request[k]]).toEqual([model, k, v]);
      charged += expectedCharge(prompt, (completion as { usage: { completion_tokens: number } }).usage.completion_tokens);
    }
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charged, locked: 0 });
  });
});

describe("default catalog", () => {
  test("Anthropic models are listed at list price × 1.2 with cost = list price, like every other model", () => {
    const raw = JSON.parse(readFileSync(new URL("../config/models.json", import.meta.url), "utf8"));
    const env = Object.fromEntries(Object.values(raw.providers as Record<string, { apiKeyEnv: string }>).map((p) => [p.apiKeyEnv, "x"]));
    const catalog = parseCatalog(raw, env);
    const anthropic = [...catalog.models.values()].filter((m) => m.provider.type === "anthropic");
    expect(anthropic.length).toBeGreaterThanOrEqual(4);
    for (const m of catalog.models.values()) {
      expect([m.id, m.promptPico]).toEqual([m.id, Math.round(m.costPromptPico * 1.2)]);
      expect([m.id, m.completionPico]).toEqual([m.id, Math.round(m.costCompletionPico * 1.2)]);
    }
  });
});
