/**
 * A stored conversation continued on another gateway process right after the answer: what load-balanced clients
 * do (the AI SDK's second turn, the Agents SDK's previous_response_id). An answer leaves without waiting for its
 * conversation's write, so the next turn, sent to the other process the moment the first one is read, may read
 * before the write is applied and reads the fresh id again; it finds the whole conversation on the other process,
 * both ways, with credit leases off and on.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { type ChildGateway, freePort, startChildGateway } from "./helpers/child.ts";
import { startGateway, type TestGateway } from "./helpers/gateway.ts";
import { REPLY_WORDS } from "./helpers/openaiStandin.ts";

const ECHO = "standin/echo";
const REPLY = REPLY_WORDS.join("");
const TURNS = 8;

for (const leases of ["off", "on"] as const) {
  describe(`responses continued on another process (CREDIT_LEASES=${leases})`, () => {
    let gw: TestGateway;
    let child: ChildGateway;

    beforeAll(async () => {
      gw = await startGateway({ CREDIT_LEASES: leases }, { redisPort: freePort() });
      child = await startChildGateway({ ...gw.sharedEnv(), CREDIT_LEASES: leases });
    }, 90_000);

    afterAll(async () => {
      if (child?.proc.exitCode === null) child.proc.kill("SIGKILL");
      await gw?.close();
    }, 30_000);

    /** The first turn on one process, the second on the other: the upstream gets the whole conversation. */
    async function continued(stream: boolean, reverse: boolean): Promise<void> {
      const { key } = await gw.newWallet(10);
      const here = gw.openai(key);
      const there = new OpenAI({ baseURL: `${child.url}/v1`, apiKey: key, maxRetries: 0 });
      const [first, second] = reverse ? [there, here] : [here, there];
      for (let turn = 0; turn < TURNS; turn++) {
        let id: string;
        if (stream) {
          const events = await first.responses.create({ model: ECHO, input: `Turn ${turn}.`, stream: true });
          let completed: OpenAI.Responses.Response | undefined;
          for await (const e of events) if (e.type === "response.completed") completed = e.response;
          id = completed!.id;
        } else {
          id = (await first.responses.create({ model: ECHO, input: `Turn ${turn}.` })).id;
        }
        const next = await second.responses.create({ model: ECHO, previous_response_id: id, input: "Go on." });
        expect(next.output_text).toBe(REPLY);
        expect(gw.standin.requests.at(-1)!.messages).toEqual([
          { role: "user", content: `Turn ${turn}.` },
          { role: "assistant", content: REPLY },
          { role: "user", content: "Go on." },
        ]);
      }
    }

    test("JSON answer here, next turn there, and back", async () => {
      await continued(false, false);
      await continued(false, true);
    }, 60_000);

    test("streamed answer here, next turn there, and back", async () => {
      await continued(true, false);
      await continued(true, true);
    }, 60_000);
  });
}
