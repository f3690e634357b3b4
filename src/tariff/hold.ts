import type { Model } from "../providers/catalog.ts";
import { holdMicro } from "./charge.ts";
import { adapterFor } from "../providers/index.ts";
import type { ChatRequest, ProviderAdapter } from "../providers/types.ts";

/** The spec's default max_tokens: the completion cap of a request that names none. */
export const DEFAULT_MAX_TOKENS = 1024;

/** How many of each part a request carries: the shape logged with a settle above its hold (never content). */
export interface RequestShape {
  messages: number;
  images: number;
  audio: number;
  files: number;
  /** Content parts of a type the gateway does not know (the provider may bill them in ways it cannot bound). */
  otherParts: number;
  tools: number;
  choices: number;
}

/** The reserve of one request: what the provider can bill for it at most, in tokens and at the billed prices. */
export interface ReserveBound {
  /** Upper bound on prompt tokens, never above the context window. */
  promptTokens: number;
  /** The completion cap per choice × choices. */
  completionTokens: number;
  /** µUSDC to hold. */
  micro: number;
  /** An input the gateway cannot bound (audio, files, unknown parts, an image without a known maximum) made the context window the prompt bound. */
  unbounded: boolean;
  shape: RequestShape;
}

/** Completion tokens of one choice: max_tokens (or max_completion_tokens, default 1024) clamped to the model's output. */
export function completionCap(model: Model, body: ChatRequest): number {
  return Math.min(body.max_tokens ?? body.max_completion_tokens ?? DEFAULT_MAX_TOKENS, model.maxOutputTokens);
}

type Part = Record<string, unknown> | string | null | undefined;
const KNOWN_DETAILS: ReadonlySet<string> = new Set(["low", "high", "auto"]);

// The bytes an image's data takes in the upstream body: a URL goes verbatim, a data URL's base64 after its comma
// (the OpenAI dialect sends the whole data URL, the Anthropic one only the base64). Counted in UTF-16 units, which
// are never more than its UTF-8 bytes, so what is taken off the body's length is never more than it added.
function imagePayloadLength(part: Record<string, unknown>): number {
  const image = part.image_url;
  const url =
    typeof image === "string" ? image : typeof (image as { url?: unknown })?.url === "string" ? (image as { url: string }).url : "";
  return url.startsWith("data:") ? url.length - url.indexOf(",") - 1 : url.length;
}

/**
 * Whether the upstream request can write to the provider's cache: it carries a `cache_control` breakpoint (only the
 * Anthropic dialects pass them on; an OpenAI-compatible request has its messages rebuilt without them, parts.ts).
 * Looked for as the key in the body's JSON: inside a string its quotes are escaped, so a prompt that merely mentions
 * it never matches (a false match would only hold more).
 */
export function mayWriteCache(upstreamBody: string): boolean {
  return upstreamBody.includes('"cache_control"');
}

/**
 * The reserve: an upper bound of everything the provider can bill for this request.
 * - Text, tool definitions, `response_format` schemas, message framing: bytes of the upstream body (+ 8). Every
 *   token of a byte-level BPE or byte-fallback tokenizer covers at least one byte, whichever vendor's, and the
 *   JSON framing of a message (≥ 28 bytes) exceeds the few tokens a chat template adds around it.
 * - Image parts: their data's bytes are taken off and the model's maximum for their `detail` added instead (its
 *   catalog `imageTokens`), since an image is billed by its pixels, not its bytes. A model without `imageTokens`
 *   has no known maximum — an OpenAI-compatible host's vision models range from 85 to 16,384+ tokens an image
 *   (Qwen-VL), whatever the provider type — so its images make the context window the prompt bound.
 * - `hiddenPromptTokens`: what the provider adds unseen (Anthropic's tool-use system prompt, OpenAI's rendering of
 *   tools and response schemas), as the adapter reports it.
 * - Audio, files, unknown parts and images of an unknown `detail` cannot be bounded from the request (an audio's
 *   duration, a PDF's pages): they make the context window the prompt bound (the chat route refuses the parts
 *   before this, parts.ts; this is the second line).
 * - The prompt bound never exceeds the context window: a provider refuses a longer prompt, unbilled.
 * - Completion: the cap (max_tokens clamped to the model's maximum output, always sent upstream) per choice.
 * - Every prompt token is held at the highest prompt rate it can be billed at (charge.ts holdPromptPico): a cache
 *   read's price if above the prompt's, and the cache write prices when the request can write (mayWriteCache).
 * `maxTokens` is the cap the upstream call was shaped with (decided once by the caller, with `completionCap`);
 * `cachesUnasked`: the provider may write to its cache with no breakpoint in the body (the adapter says so).
 */
export function reserveFor(
  model: Model,
  body: ChatRequest,
  upstreamBody: string,
  hiddenPromptTokens = 0,
  maxTokens = completionCap(model, body),
  cachesUnasked = false,
): ReserveBound {
  const images = model.imageTokens;
  const shape: RequestShape = {
    messages: body.messages.length,
    images: 0,
    audio: 0,
    files: 0,
    otherParts: 0,
    tools: 0,
    choices: body.n ?? 1,
  };
  let imageTokens = 0;
  let imageBytes = 0;
  let unboundedImage = false;
  for (const m of body.messages as Record<string, unknown>[]) {
    if (!m || typeof m !== "object") continue;
    if (m.audio !== undefined && m.audio !== null) shape.audio++; // an earlier audio answer, billed as audio input
    if (!Array.isArray(m.content)) continue;
    for (const part of m.content as Part[]) {
      if (typeof part === "string" || !part || typeof part !== "object") continue; // text as bytes (or nothing)
      const type = part.type;
      if (type === "text" || type === "refusal") continue;
      if (type === "image_url") {
        shape.images++;
        const detail = (part.image_url as { detail?: unknown } | undefined)?.detail;
        // No maximum is known for a model without imageTokens, nor for a detail level the gateway does not know
        // (a provider's newer, finer one).
        if (!images || (detail !== undefined && !KNOWN_DETAILS.has(detail as string))) unboundedImage = true;
        else imageTokens += detail === "low" ? images.low : Math.max(images.low, images.high);
        imageBytes += imagePayloadLength(part);
      } else if (type === "input_audio") shape.audio++;
      else if (type === "file") shape.files++;
      else shape.otherParts++;
    }
  }
  shape.tools = (Array.isArray(body.tools) ? body.tools.length : 0) + (Array.isArray(body.functions) ? body.functions.length : 0);

  const unbounded = unboundedImage || shape.audio + shape.files + shape.otherParts > 0;
  const bytes = Buffer.byteLength(upstreamBody) - imageBytes;
  const promptTokens = unbounded ? model.contextLength : Math.min(bytes + 8 + imageTokens + hiddenPromptTokens, model.contextLength);
  const completionTokens = maxTokens * shape.choices;
  return {
    promptTokens,
    completionTokens,
    micro: holdMicro(model, promptTokens, completionTokens, cachesUnasked || mayWriteCache(upstreamBody)),
    unbounded,
    shape,
  };
}

/**
 * The upstream request as it will be sent, and the hold that covers it: what the provider can bill at most (the
 * prompt's upper bound from the upstream body, images at their maximum, what the provider adds unseen, at most the
 * context window; plus the completion cap per choice, decided here once and sent upstream as it is held).
 * `adapter` is the provider type's own unless a front door sends the client's request in the provider's format
 * (the same bound rules then apply to that body, computed from the same chat-shaped request).
 */
export function boundedRequest(
  model: Model,
  body: ChatRequest,
  stream: boolean,
  adapter: ProviderAdapter = adapterFor(model.provider.type),
) {
  const maxTokens = completionCap(model, body);
  const { url, init, hiddenPromptTokens, cachesUnasked } = adapter.request({ model, body, stream, maxTokens });
  const bound = reserveFor(model, body, init.body as string, hiddenPromptTokens, maxTokens, cachesUnasked);
  return { adapter, url, init, bound };
}

/**
 * The hold of a request that may be served by any model of a failover chain (catalog `fallbacks`): the dearest of
 * their bounds, so whichever serves is charged (at its own prices, within its own bound) inside it.
 */
export function dearestBound(bounds: readonly ReserveBound[]): ReserveBound {
  let dearest = bounds[0]!;
  for (const b of bounds) if (b.micro > dearest.micro) dearest = b;
  return dearest;
}

/**
 * The hold of an embeddings request (POST /v1/embeddings): each input's bytes + 8 as its prompt tokens (a token of
 * a byte-level or byte-fallback tokenizer covers at least one byte; the 8 cover the special tokens a model adds), at
 * most the model's context window each (a provider refuses a longer input, unbilled), at the prompt price; nothing
 * is generated.
 */
export function embeddingsBound(model: Model, inputs: readonly string[]): ReserveBound {
  let promptTokens = 0;
  for (const input of inputs) promptTokens += Math.min(Buffer.byteLength(input) + 8, model.contextLength);
  return {
    promptTokens,
    completionTokens: 0,
    micro: holdMicro(model, promptTokens, 0, false),
    unbounded: false,
    shape: { messages: inputs.length, images: 0, audio: 0, files: 0, otherParts: 0, tools: 0, choices: 1 },
  };
}
