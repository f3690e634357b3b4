/**
 * Chat traffic through the in-process gateway and what it leaves in the outbox and in Postgres: shared by the
 * flusher and rebuild tests (one echo message, its usage and its charge at the test catalog's prices).
 */
import { expectedCharge, type TestGateway } from "./gateway.ts";
import { usageFor } from "./openaiStandin.ts";

export const messages = [{ role: "user" as const, content: "hi" }];
export const usage = usageFor(messages.length); // 11 prompt, 5 completion tokens
export const CHARGE = expectedCharge(usage.prompt_tokens, usage.completion_tokens);
export const COST = Math.ceil(usage.prompt_tokens * 2 + usage.completion_tokens * 8); // test catalog cost: 2 / 8 USD per 1M

/** Helpers bound to a file's gateway (started in its beforeAll, hence the getter). */
export function ledgerTraffic(gateway: () => TestGateway) {
  const streams = () =>
    gateway()
      .services.ledger.names.allShards()
      .map((s) => gateway().services.ledger.names.outbox(s));

  /** n answers, then their settles: these tests read the outbox on another connection than the settles use. */
  async function chat(key: string, n = 1) {
    for (let i = 0; i < n; i++) await gateway().openai(key).chat.completions.create({ model: "standin/echo", messages });
    await gateway().services.chat.idle();
  }

  /** Status of a raw chat call (for the failures: the SDK's promise does not suit expect().rejects). */
  async function chatStatus(key: string, model: string): Promise<number> {
    const res = await gateway().call("POST", "/v1/chat/completions", { model, messages }, { authorization: `Bearer ${key}` });
    return res.status;
  }

  /** Events in every outbox stream together (a settle batch's charges share one entry). */
  async function outboxLength(): Promise<number> {
    let n = 0;
    for (const s of streams()) {
      for (const [, f] of await gateway().services.redis.xrange(s, "-", "+")) n += (JSON.parse(`[${f[1]!}]`) as unknown[]).length;
    }
    return n;
  }

  /** A wallet's ledger_events rows, by event id. */
  async function rows(wallet: string) {
    const sql = gateway().services.sql;
    return [
      ...(await sql<
        {
          event_id: string;
          type: string;
          hold_id: string;
          api_key_id: number;
          model: string | null;
          amount_usdc: number;
          cost_usd_micro: number;
          prompt_tokens: number;
          completion_tokens: number;
        }[]
      >`
        SELECT event_id, type, hold_id, api_key_id, model, amount_usdc, cost_usd_micro, prompt_tokens, completion_tokens
        FROM ledger_events WHERE wallet = ${wallet} ORDER BY event_id`),
    ];
  }

  return { streams, chat, chatStatus, outboxLength, rows };
}
