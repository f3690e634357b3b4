/**
 * A Responses request's tools as chat completions takes them, and the way back. Function tools map one to one.
 * A namespace (a client-side group of function tools: Codex's `{"type": "namespace", "name": "multi_agent_v1",
 * "tools": [...]}`) has no chat form: its tools go up flat, each under a name of its own that cannot collide with
 * the request's (`multi_agent_v1__spawn_agent`), and a call of one comes back as the client named it, its
 * `namespace` beside its own name. A tool the provider would run itself (`web_search`, `file_search`, …) cannot run
 * on chat completions: it is left out of the upstream request and named in the answer's X-Tools-Left-Out header.
 *
 * A custom tool (freeform input: plain text, or text in a grammar, as Codex's JavaScript `exec`) has no chat form
 * either: it goes up as a function tool taking one string, `input`, and a call of it comes back as a
 * `custom_tool_call` with that string as its `input` (customInput). Tools may come in the request's `tools` and in
 * `additional_tools` input items (Codex declares its tools there): all are merged, in that order.
 */
import type { Item, ResponsesTool } from "./wire.ts";

/** The header that names the tools a request declared and the gateway left out of the upstream request. */
export const TOOLS_LEFT_OUT_HEADER = "x-tools-left-out";

/** What a chat tool name is to the client: a tool of its own, or one of a namespace. */
export interface ClientToolName {
  name: string;
  namespace?: string;
  /** A custom tool: its call is a custom_tool_call whose `input` is the chat call's `input` argument. */
  custom?: true;
}

/** The tools a request declares: its `tools`, then those of each `additional_tools` item of its conversation. */
export function declaredTools(tools: readonly ResponsesTool[] | undefined, items: readonly Item[]): ResponsesTool[] {
  const all = Array.isArray(tools) ? [...tools] : [];
  for (const item of items) if (item?.type === "additional_tools" && Array.isArray(item.tools)) all.push(...item.tools);
  return all;
}

/**
 * A custom tool call's input from the chat call's arguments: the `input` string of the JSON object the function
 * form asks for; arguments of any other shape (a model that did not keep to the schema) come back as they were.
 */
export function customInput(args: string): string {
  try {
    const parsed = JSON.parse(args) as unknown;
    if (typeof parsed === "object" && parsed !== null && typeof (parsed as { input?: unknown }).input === "string")
      return (parsed as { input: string }).input;
  } catch {
    // not JSON: the text itself
  }
  return args;
}

/** A custom tool call's input as the chat call's arguments (the function form's one parameter). */
export const customArguments = (input: unknown) => JSON.stringify({ input: typeof input === "string" ? input : "" });

// Chat's tool names (OpenAI's and Anthropic's rules alike): letters, digits, _ and -, at most 64.
const MAX_NAME = 64;
const safe = (s: string) => s.replace(/[^A-Za-z0-9_-]/g, "_");

/** A chat function tool for a Responses function tool, under `name`. */
function chatFunction(t: ResponsesTool, name: string): unknown {
  return {
    type: "function",
    function: {
      name,
      ...(t.description ? { description: t.description } : {}),
      parameters: t.parameters ?? { type: "object", properties: {} },
      ...(typeof t.strict === "boolean" ? { strict: t.strict } : {}),
    },
  };
}

/** A chat function tool for a Responses custom tool: one string parameter, `input`, described by the tool's format. */
function customFunction(t: ResponsesTool, name: string): unknown {
  const f = t.format;
  const grammar =
    f?.type === "grammar" && typeof f.definition === "string"
      ? ` It must match this ${typeof f.syntax === "string" ? f.syntax : ""} grammar:\n${f.definition}`
      : "";
  return {
    type: "function",
    function: {
      name,
      ...(t.description ? { description: t.description } : {}),
      parameters: {
        type: "object",
        properties: { input: { type: "string", description: `The tool's whole input, as raw text (not JSON).${grammar}` } },
        required: ["input"],
        additionalProperties: false,
      },
    },
  };
}

/** One request's tools, flattened for chat; its calls named back (a fresh one per request). */
export class ResponsesTools {
  /** The tools chat completions gets, in the request's order (a namespace's where it stood). */
  readonly chat: unknown[] = [];
  /** The types of the tools left out (a provider would run them; chat has no form for them), each once. */
  readonly leftOut: string[] = [];
  private readonly taken = new Set<string>();
  /** Chat name → namespace and own name, for the namespaced and custom tools only. */
  private readonly named = new Map<string, ClientToolName>();
  /** `namespace\0name` → chat name. */
  private readonly flat = new Map<string, string>();

  constructor(tools: readonly ResponsesTool[] | undefined) {
    const list = Array.isArray(tools) ? tools : [];
    // The request's own names first: a flattened name must never take one.
    for (const t of list) if (t?.type !== "namespace" && typeof t?.name === "string") this.taken.add(t.name);
    list.forEach((t) => {
      if (t?.type === "function") this.chat.push(chatFunction(t, t.name as string));
      else if (t?.type === "custom" && typeof t.name === "string") {
        this.named.set(t.name, { name: t.name, custom: true });
        this.chat.push(customFunction(t, t.name));
      } else if (t?.type === "namespace") this.addNamespace(t as ResponsesTool & { tools?: ResponsesTool[] });
      else {
        const type = String(t?.type).slice(0, 64);
        if (!this.leftOut.includes(type)) this.leftOut.push(type);
      }
    });
  }

  private addNamespace(ns: ResponsesTool & { tools?: ResponsesTool[] }): void {
    const namespace = typeof ns.name === "string" ? ns.name : "";
    for (const t of Array.isArray(ns.tools) ? ns.tools : []) {
      if ((t?.type !== "function" && t?.type !== "custom") || typeof t.name !== "string") {
        // What a namespace holds besides function and custom tools has no flat chat form either: left out, said so.
        const type = `${safe(namespace)}.${String(t?.type).slice(0, 64)}`;
        if (!this.leftOut.includes(type)) this.leftOut.push(type);
        continue;
      }
      const name = this.chatName(t.name, namespace);
      if (t.type === "custom") {
        this.named.set(name, { name: t.name, namespace, custom: true });
        this.chat.push(customFunction(t, name));
      } else this.chat.push(chatFunction(t, name));
    }
  }

  /**
   * The chat name of `name` in `namespace` (none: the name itself): `namespace__name`, made safe, cut to 64, with
   * `_2`, `_3`… where that is taken. The same pair always gets the same name within a request, so an earlier
   * turn's call (a function_call item with its namespace) matches the tool it called.
   */
  chatName(name: string, namespace?: string): string {
    if (namespace === undefined || namespace === null) return name;
    const key = `${namespace}\0${name}`;
    const known = this.flat.get(key);
    if (known) return known;
    const base = safe(`${namespace}__${name}`).slice(0, MAX_NAME);
    let chat = base;
    for (let n = 2; this.taken.has(chat); n++) chat = base.slice(0, MAX_NAME - String(n).length - 1) + `_${n}`;
    this.taken.add(chat);
    this.flat.set(key, chat);
    this.named.set(chat, { name, namespace });
    return chat;
  }

  /** What the client calls the tool chat named `chatName`: its own name, its namespace if it had one, custom or not. */
  clientName(chatName: string): ClientToolName {
    return this.named.get(chatName) ?? { name: chatName };
  }
}
