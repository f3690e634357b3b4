/**
 * Requests captured from real coding agents (test/fixtures/agents/*.json: Claude Code, Codex (with a catalog model and
 * with its defaults), opencode, Qwen Code,
 * installed from npm and pointed at a gateway the way docs/clients.md says), replayed through the gateway's doors.
 * Each file names the agent, its version and how it was run. Captured bytes are kept as they were, but for what
 * was secret or machine-specific (keys and Host dropped, paths, session and device ids replaced). A request of a
 * tool round trip that repeats an earlier one is stored as that one plus what changed (`continues` + `patch`),
 * rebuilt here into the body the agent sent.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { BASE, type TestGateway } from "./gateway.ts";

type Body = Record<string, any>;

/** One captured request, rebuilt. */
export interface AgentRequest {
  name: string;
  method: string;
  path: string;
  search: string;
  headers: Record<string, string>;
  body: Body;
}

interface Patch {
  keys: string[];
  same: string[];
  keep: number;
  tail: unknown[];
  fields: Body;
}
type Stored = Omit<AgentRequest, "body"> & { body?: Body; continues?: string; patch?: Patch };

/** The requests of one agent's fixture, by name. */
export function agentFixture(file: "claude-code" | "codex" | "codex-default" | "opencode" | "qwen-code"): Map<string, AgentRequest> {
  const raw = JSON.parse(readFileSync(join(import.meta.dir, "..", "fixtures", "agents", `${file}.json`), "utf8")) as { requests: Stored[] };
  const out = new Map<string, AgentRequest>();
  for (const r of raw.requests) {
    let body = r.body;
    if (r.continues) {
      const from = out.get(r.continues)!.body;
      const p = r.patch!;
      const conversation = "messages" in from ? "messages" : "input";
      body = {};
      for (const k of p.keys) {
        body[k] = p.same.includes(k) ? from[k] : k === conversation ? [...from[k].slice(0, p.keep), ...p.tail] : p.fields[k];
      }
    }
    const { continues: _c, patch: _p, ...rest } = r;
    out.set(r.name, { ...rest, body: structuredClone(body!) });
  }
  return out;
}

/**
 * Sends a captured request to the gateway as the agent sent it (its headers, its `?beta=true`), with `key` where
 * the agent put its key (the fixture's `<key>`: Authorization or x-api-key) and `over` laid on its body (the model
 * to serve it, a variant's fields; undefined deletes).
 */
export function replay(gw: TestGateway, req: AgentRequest, key: string, over: Body = {}): Promise<Response> {
  const body = { ...req.body, ...over };
  for (const [k, v] of Object.entries(over)) if (v === undefined) delete body[k];
  const headers = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, v.replace("<key>", key)]));
  return gw.handle(new Request(BASE + req.path + req.search, { method: req.method, headers, body: JSON.stringify(body) }));
}

/** An SSE body's events: `event:` name (if any) and parsed `data:` JSON (`[DONE]` left out). */
export function sseEvents(text: string): { event?: string; data: any }[] {
  const events: { event?: string; data: any }[] = [];
  for (const frame of text.split("\n\n")) {
    let event: string | undefined;
    let data = "";
    for (const line of frame.split("\n")) {
      if (line.startsWith("event: ")) event = line.slice(7);
      else if (line.startsWith("data: ")) data += line.slice(6);
    }
    if (data && data !== "[DONE]") events.push({ event, data: JSON.parse(data) });
  }
  return events;
}
