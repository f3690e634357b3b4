/**
 * The Responses store is bounded: a stored conversation cost far more Redis than it was billed (a 3 MB inline image,
 * billed as one image, kept 4 MB), with no bound on a conversation or a wallet. Here, with small bounds: an item or
 * a conversation over its bound is refused 400 in OpenAI's shape before anything is held (nothing charged, nothing
 * stored; store:false serves it); a wallet at its bound of responses or bytes stores nothing more, and its next
 * store:true request is refused the same way; an inline image is not stored, and a later turn continuing it by id
 * is 400, saying to resend the conversation.
 */
import { describe, expect, test } from "bun:test";
import { sharedGateway } from "./helpers/gateway.ts";

const gw = sharedGateway({
  RESPONSES_STORE_MAX_ITEM_BYTES: "2048",
  RESPONSES_STORE_MAX_CONVERSATION_BYTES: "8192",
  RESPONSES_STORE_MAX_WALLET_BYTES: "12000",
  RESPONSES_STORE_MAX_WALLET_RESPONSES: "3",
});

const ECHO = "standin/echo";
const START = 1_000_000;

const post = (key: string, body: Record<string, unknown>) =>
  gw.call("POST", "/v1/responses", { model: ECHO, ...body }, { authorization: `Bearer ${key}` });

/** The wallet's stored responses, read after every write already sent on the store's connection. */
async function storedResponses(wallet: string): Promise<string[]> {
  const names = gw.services.ledger.names;
  const barrier = names.storedResponse(names.shardOf(wallet), wallet, "barrier");
  await gw.services.scripts.client.send("GET", [barrier], barrier); // same connection: after the store's writes
  const keys = await gw.services.redis.keys(names.storedResponse(names.shardOf(wallet), wallet, "*"));
  return (await Promise.all(keys.map((k) => gw.services.redis.get(k)))).filter((v): v is string => v !== null);
}

async function expectNothingDone(wallet: string) {
  await gw.services.chat.idle();
  expect(await gw.ledgerState(wallet)).toEqual({ balance: START, locked: 0 });
  expect(await storedResponses(wallet)).toEqual([]);
}

describe("bounds checked before the call: 400 in OpenAI's shape, nothing charged, nothing stored", () => {
  test("an item over RESPONSES_STORE_MAX_ITEM_BYTES: store_item_too_large; with store:false it is served", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const input = [{ role: "user", content: "x".repeat(3000) }];
    const res = await post(key, { input });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ type: "invalid_request_error", code: "store_item_too_large", param: "input" });
    expect(res.body.error.message).toMatch(
      /^Item 0 of the conversation is \d+ bytes, over the 2048 bytes one stored item may have; send store: false/,
    );
    await expectNothingDone(wallet);
    expect((await post(key, { input, store: false })).status).toBe(200);
  });

  test("a conversation over RESPONSES_STORE_MAX_CONVERSATION_BYTES: store_conversation_too_large", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const input = Array.from({ length: 5 }, () => ({ role: "user", content: "y".repeat(1800) }));
    const res = await post(key, { input });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ type: "invalid_request_error", code: "store_conversation_too_large", param: "input" });
    await expectNothingDone(wallet);
  });
});

describe("a wallet's bound (RESPONSES_STORE_MAX_WALLET_RESPONSES, …_BYTES)", () => {
  test("responses: three stored; the fourth is answered but not stored; the next store:true is refused, store:false served", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) {
      const res = await post(key, { input: `turn ${i}` });
      expect(res.status).toBe(200);
      ids.push(res.body.id);
    }
    expect(await storedResponses(wallet)).toHaveLength(3);
    const continued = await post(key, { previous_response_id: ids[3], input: "and?", store: false });
    expect(continued.status).toBe(400);
    expect(continued.body.error.code).toBe("previous_response_not_found");

    await gw.services.chat.idle();
    const before = await gw.ledgerState(wallet);
    const refused = await post(key, { input: "one more" });
    expect(refused.status).toBe(400);
    expect(refused.body.error).toMatchObject({ type: "invalid_request_error", code: "store_limit_reached", param: "store" });
    expect(refused.body.error.message).toContain("send store: false");
    await gw.services.chat.idle();
    expect(await gw.ledgerState(wallet)).toEqual(before);
    expect(await storedResponses(wallet)).toHaveLength(3);
    expect((await post(key, { input: "one more", store: false })).status).toBe(200);
    // The stored ones are continued as before.
    expect((await post(key, { previous_response_id: ids[0], input: "go on", store: false })).status).toBe(200);
  });

  test("bytes: a second large conversation passes 12,000 bytes and is not stored; the next store:true is refused", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const input = Array.from({ length: 4 }, () => ({ role: "user", content: "z".repeat(1500) }));
    for (let i = 0; i < 2; i++) expect((await post(key, { input })).status).toBe(200);
    const stored = await storedResponses(wallet);
    expect(stored).toHaveLength(1);
    expect(Buffer.byteLength(stored[0]!)).toBeGreaterThan(6000);
    expect((await post(key, { input: "short" })).body.error?.code).toBe("store_limit_reached");
  });
});

describe("inline data is not stored", () => {
  test("a data: URL image: served, stored without it; continuing it by id is 400 saying to resend the conversation", async () => {
    const { wallet, key } = await gw.newWallet(1);
    const image = `data:image/png;base64,${Buffer.alloc(1500, 7).toString("base64")}`;
    const input = [
      {
        role: "user",
        content: [
          { type: "input_text", text: "What is in this image?" },
          { type: "input_image", image_url: image },
        ],
      },
    ];
    const res = await post(key, { model: "standin/vision", input });
    expect(res.status).toBe(200);
    const stored = await storedResponses(wallet);
    expect(stored).toHaveLength(1);
    expect(stored[0]).not.toContain("base64");
    expect(stored[0]).toContain("What is in this image?");
    await gw.services.chat.idle();
    const before = await gw.ledgerState(wallet);
    const next = await post(key, { model: "standin/vision", previous_response_id: res.body.id, input: "and the colours?" });
    expect(next.status).toBe(400);
    expect(next.body.error).toMatchObject({
      type: "invalid_request_error",
      code: "stored_inline_data_not_kept",
      param: "previous_response_id",
    });
    expect(next.body.error.message).toContain("resend the whole conversation in input");
    await gw.services.chat.idle();
    expect(await gw.ledgerState(wallet)).toEqual(before);
  });
});
