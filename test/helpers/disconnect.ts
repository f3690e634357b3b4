import { expect } from "bun:test";
import { BASE, type TestGateway } from "./gateway.ts";

/**
 * A client that leaves a stream mid-answer: opens `body` as a stream on `path`, reads until `pieces` matched `n`
 * times in what arrived, cancels, and waits until the provider saw the cancel and the gateway settled. The doors'
 * disconnect tests compare what that costs on each endpoint against chat.
 */
export async function leaveStreamAfter(
  gw: TestGateway,
  path: string,
  key: string,
  body: { model: string; [field: string]: unknown },
  n: number,
  pieces: RegExp,
): Promise<void> {
  const standin = body.model.startsWith("claude/") ? gw.anthropic : gw.standin;
  const cancelled = standin.cancelled;
  const res = await gw.handle(
    new Request(BASE + path, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    }),
  );
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let seen = "";
  while ((seen.match(pieces) ?? []).length < n) {
    const r = await reader.read();
    if (r.done) throw new Error("stream ended early");
    seen += dec.decode(r.value, { stream: true });
  }
  await reader.cancel();
  await standin.cancelledAtLeast(cancelled + 1);
  await gw.services.chat.idle();
}
