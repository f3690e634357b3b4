import { describe, expect, test } from "bun:test";
import { expectedCharge, sharedGateway } from "./helpers/gateway.ts";
import { REPLY_WORDS, usageFor } from "./helpers/openaiStandin.ts";

const gw = sharedGateway();

const messages = [
  { role: "system" as const, content: "You are terse." },
  { role: "user" as const, content: "Say hello." },
];
const usage = usageFor(messages.length);
const charge = expectedCharge(usage.prompt_tokens, usage.completion_tokens);

async function pgCharges(wallet: string) {
  return gw.services.sql<{ amount_usdc: number; prompt_tokens: number; completion_tokens: number; api_key_id: number; model: string }[]>`
    SELECT amount_usdc, prompt_tokens, completion_tokens, api_key_id, model FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge'`;
}

describe("chat completions, happy paths", () => {
  test("non-streaming call through the openai SDK charges exactly the reported usage", async () => {
    const { wallet, key, keyId } = await gw.newWallet(10);
    const completion = await gw.openai(key).chat.completions.create({ model: "standin/echo", messages, max_tokens: 100 });

    expect(completion.choices[0]!.message.content).toBe(REPLY_WORDS.join(""));
    expect(completion.usage).toMatchObject(usage);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charge, locked: 0 });
    // The upstream got the upstream model name and the clamped max_tokens.
    expect(gw.standin.requests.at(-1)).toMatchObject({ model: "echo", max_tokens: 100 });

    await gw.services.flusher.drain();
    expect([...(await pgCharges(wallet))]).toEqual([
      {
        amount_usdc: charge,
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
        api_key_id: keyId,
        model: "standin/echo",
      },
    ]);
  });

  test("streaming through the SDK without include_usage: no usage chunk reaches the client, charge exact", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const stream = await gw.openai(key).chat.completions.create({ model: "standin/echo", messages, stream: true });
    let text = "";
    let sawUsage = false;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? "";
      if (chunk.usage) sawUsage = true;
    }
    expect(text).toBe(REPLY_WORDS.join(""));
    expect(sawUsage).toBe(false);
    // The gateway asked the provider for usage anyway.
    expect(gw.standin.requests.at(-1)).toMatchObject({ stream: true, stream_options: { include_usage: true } });
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charge, locked: 0 });
  });

  test("streaming with include_usage passes the usage chunk through", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const stream = await gw.openai(key).chat.completions.create({
      model: "standin/echo",
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    let reported;
    for await (const chunk of stream) if (chunk.usage) reported = chunk.usage;
    expect(reported).toMatchObject(usage);
    expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charge, locked: 0 });
  });

  test("the raw stream ends with data: [DONE]", async () => {
    const { key } = await gw.newWallet(10);
    const res = await gw.handle(
      new Request("https://gateway.test/v1/chat/completions", {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "standin/echo", messages, stream: true }),
      }),
    );
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    const text = await res.text();
    expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
    expect(text.match(/data: \[DONE\]/g)).toHaveLength(1);
  });

  test("a stream the provider sent whole leaves as one body, already charged; a longer one as it comes", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: (r) => gw.handle(r) });
    try {
      const ask = (model: string) =>
        fetch(`http://127.0.0.1:${server.port}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: JSON.stringify({ model, messages, stream: true, stream_options: { include_usage: true } }),
        });
      // The stand-in's echo arrives in one read: its end was read, and its charge sent, before the headers left.
      const whole = await ask("standin/echo");
      expect(whole.headers.get("content-type")).toBe("text/event-stream");
      expect(await gw.ledgerState(wallet)).toEqual({ balance: 10_000_000 - charge, locked: 0 });
      const text = await whole.text();
      expect(whole.headers.get("content-length")).toBe(String(Buffer.byteLength(text)));
      expect(text).toContain(`"charge_usdc":${charge}`);
      expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
      // Words 50 ms apart: the answer leaves with the first read and streams on (chunked), held until its end.
      const dripped = await ask("standin/drip");
      expect(dripped.headers.get("transfer-encoding")).toBe("chunked");
      expect((await gw.ledgerState(wallet)).locked).toBeGreaterThan(0);
      expect(await dripped.text()).toEndWith("data: [DONE]\n\n");
      expect((await gw.ledgerState(wallet)).locked).toBe(0);
    } finally {
      void server.stop(true);
    }
  });

  test("usage, balance and Postgres agree to the µUSDC after drain", async () => {
    const { account, wallet, key, keyId } = await gw.newWallet(5);
    const client = gw.openai(key);
    for (let i = 0; i < 3; i++) await client.chat.completions.create({ model: "standin/echo", messages });
    const s = await client.chat.completions.create({ model: "standin/echo", messages, stream: true });
    for await (const _ of s);

    const res = await gw.call("GET", `/v1/usage/${wallet}`, undefined, { authorization: `Bearer ${key}` });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      wallet,
      balance_usdc: 5_000_000 - 4 * charge,
      locked_usdc: 0,
      available_usdc: 5_000_000 - 4 * charge,
      keys: [
        {
          api_key_id: keyId,
          label: "test",
          request_count: 4,
          total_prompt_tokens: 4 * usage.prompt_tokens,
          total_completion_tokens: 4 * usage.completion_tokens,
          total_cached_prompt_tokens: 0,
          total_cache_write_tokens: 0,
          total_charged_usdc: 4 * charge,
          // billed − cost at 2/8 USD per 1M
          total_platform_revenue_usd: (4 * (charge - Math.ceil(usage.prompt_tokens * 2 + usage.completion_tokens * 8))) / 1e6,
        },
      ],
    });
    // SIWE (query) gives the same view.
    const { message, signature } = await gw.signIn(account);
    const viaSiwe = await gw.call("GET", `/v1/usage/${wallet}?message=${encodeURIComponent(message)}&signature=${signature}`);
    expect(viaSiwe.body).toEqual(res.body);

    const balance = await gw.call("GET", `/v1/balance/${wallet.toUpperCase().replace("0X", "0x")}`);
    expect(balance.body).toEqual({ wallet, available_usdc: 5_000_000 - 4 * charge });

    await gw.services.flusher.drain();
    const [pg] = await gw.services.sql<{ credits: number; charges: number }[]>`
      SELECT (SELECT COALESCE(SUM(amount_usdc), 0)::bigint FROM credits WHERE wallet = ${wallet}) AS credits,
             (SELECT COALESCE(SUM(amount_usdc), 0)::bigint FROM ledger_events WHERE wallet = ${wallet} AND type = 'charge') AS charges`;
    expect(pg!.credits - pg!.charges).toBe(5_000_000 - 4 * charge);
  });

  test("models list shows billed prices, not cost", async () => {
    const res = await gw.call("GET", "/v1/models");
    expect(res.status).toBe(200);
    expect(res.body.object).toBe("list");
    const echo = res.body.data.find((m: { id: string }) => m.id === "standin/echo");
    expect(echo).toEqual({
      id: "standin/echo",
      object: "model",
      name: "echo",
      provider: "standin",
      kind: "chat",
      contextLength: 128000,
      promptPricePer1MTokens: 2.5,
      completionPricePer1M: 10,
      // The extensions beside the spec's fields: the names it also answers to (none here); a keyed provider is
      // never probed, so always available.
      aliases: [],
      available: true,
    });
  });

  test("health answers ok", async () => {
    expect(await gw.call("GET", "/health")).toMatchObject({ status: 200, body: { status: "ok" } });
  });
});

describe("client disconnect", () => {
  test("a client that aborts mid-stream is charged for what was produced; the hold is gone", async () => {
    const { wallet, key } = await gw.newWallet(10);
    const res = await gw.handle(
      new Request("https://gateway.test/v1/chat/completions", {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "standin/drip", messages, stream: true }),
      }),
    );
    const reader = res.body!.getReader();
    const first = await reader.read();
    expect(new TextDecoder().decode(first.value)).toContain('"role":"assistant"');
    expect((await gw.ledgerState(wallet)).locked).toBeGreaterThan(0);
    // cancel() resolves once the gateway has stopped the provider and settled the hold.
    await reader.cancel();

    const state = await gw.ledgerState(wallet);
    expect(state.locked).toBe(0);
    expect(state.balance).toBeLessThan(10_000_000);
    await gw.services.flusher.drain();
    const rows = await pgCharges(wallet);
    expect(rows).toHaveLength(1);
    expect(rows[0]!.amount_usdc).toBe(10_000_000 - state.balance);
  });
});
