import { ApiError } from "../errors.ts";

/**
 * Content parts the provider bills in ways the hold cannot bound from the request, refused for every model (400
 * VALIDATION_ERROR naming the part type) before any reserve: an audio's duration, a file's pages (OpenRouter's
 * parser may OCR each one at extra cost; a `file_id` reads files of the operator's provider account) are not in
 * its bytes, and audio is billed at audio rates, not the catalog's text price. A part type the gateway does not
 * know is refused likewise. docs/design.md "Money rules" lists them; the reason is the message's second half.
 */
export const REFUSED_PART_TYPES: Readonly<Record<string, string>> = {
  input_audio: "audio input is billed at audio rates, by a duration the hold cannot bound",
  file: "files are parsed and billed by the provider (per page, OCR, stored files) beyond what the hold can bound",
};

/** Part types whose cost the hold bounds: text and refusals by their bytes, images by their maximum (hold.ts). */
const ACCEPTED_PART_TYPES: ReadonlySet<string> = new Set(["text", "image_url", "refusal"]);

/**
 * Keys of a message an OpenAI-compatible provider receives; anything else is dropped (e.g. `cache_control`,
 * which OpenRouter passes to Anthropic and Gemini, where a cache write costs 1.25–2× the input). What is kept is
 * text the hold counts by its bytes: the turn's content, a name, tool calls and results, the older function
 * call, a refusal, and earlier reasoning (DeepSeek's `reasoning_content`, OpenRouter's `reasoning`).
 */
const FORWARDED_MESSAGE_KEYS = [
  "role",
  "content",
  "name",
  "tool_call_id",
  "function_call",
  "refusal",
  "reasoning_content",
  "reasoning",
] as const;

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);

function refuse(where: string, what: string, why: string): never {
  throw new ApiError({ code: "VALIDATION_ERROR", message: `${where}: ${what} is not accepted: ${why}` });
}

/**
 * Throws 400 VALIDATION_ERROR at the first content part (or message field) the provider could bill beyond the
 * hold: `input_audio`, `file`, a part type the gateway does not know, a message's `audio` (a reference to an
 * earlier audio answer, billed as audio input). Runs for every provider type, before any reserve.
 */
export function refuseUnboundedParts(messages: unknown): void {
  if (!Array.isArray(messages)) return; // the route's schema answers for the shape
  messages.forEach((m, i) => {
    if (!isObj(m)) return;
    if (m.audio !== undefined && m.audio !== null) refuse(`messages[${i}]`, "audio", "an earlier audio answer is billed as audio input");
    if (!Array.isArray(m.content)) return;
    m.content.forEach((part, j) => {
      const where = `messages[${i}].content[${j}]`;
      const type = isObj(part) ? part.type : undefined;
      if (typeof type === "string" && ACCEPTED_PART_TYPES.has(type)) {
        if (type === "image_url" && typeof imageUrl(part as Obj) !== "string")
          refuse(where, "an image_url without a url string", "the gateway cannot bound its cost");
        return;
      }
      const name = `content part type "${String(type).slice(0, 64)}"`;
      const why =
        typeof type === "string" && Object.hasOwn(REFUSED_PART_TYPES, type)
          ? REFUSED_PART_TYPES[type]!
          : "the gateway cannot bound what the provider bills for it";
      refuse(where, name, why);
    });
  });
}

function imageUrl(part: Obj): unknown {
  return typeof part.image_url === "string" ? part.image_url : isObj(part.image_url) ? part.image_url.url : undefined;
}

/** One content part rebuilt from its type's allow-list: `cache_control` and any other key the client added is dropped. */
function forwardedPart(part: Obj): Obj {
  switch (part.type) {
    case "image_url": {
      const detail = isObj(part.image_url) ? part.image_url.detail : undefined;
      return { type: "image_url", image_url: detail === undefined ? { url: imageUrl(part) } : { url: imageUrl(part), detail } };
    }
    case "refusal":
      return { type: "refusal", refusal: part.refusal };
    default:
      return { type: "text", text: part.text };
  }
}

// A tool call as OpenAI defines it (function or custom); anything a client added to it is dropped.
function forwardedToolCall(call: unknown): unknown {
  if (!isObj(call)) return call;
  const out: Obj = { id: call.id, type: call.type };
  if (isObj(call.function)) out.function = { name: call.function.name, arguments: call.function.arguments };
  if (isObj(call.custom)) out.custom = { name: call.custom.name, input: call.custom.input };
  return out;
}

/**
 * The messages an OpenAI-compatible provider receives: each rebuilt from the allow-lists above, after
 * refuseUnboundedParts passed them (so every part is text, an image or a refusal).
 */
export function forwardedMessages(messages: unknown[]): Obj[] {
  return messages.map((m) => {
    if (!isObj(m)) return m as Obj;
    const out: Obj = {};
    for (const key of FORWARDED_MESSAGE_KEYS) if (m[key] !== undefined) out[key] = m[key];
    if (Array.isArray(m.content)) out.content = m.content.map((p) => (isObj(p) ? forwardedPart(p) : p));
    if (Array.isArray(m.tool_calls)) out.tool_calls = m.tool_calls.map(forwardedToolCall);
    return out;
  });
}
