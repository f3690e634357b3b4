import type { ApiError } from "../errors.ts";
import type { Model } from "./catalog.ts";
import type { SseRelay } from "./sse.ts";

/**
 * Of a usage's prompt tokens, those the provider's cache served or took: each kind is billed at its own price
 * (tariff/charge.ts). Absent or 0: none. Their sum never exceeds prompt_tokens.
 */
export interface CacheTokens {
  /** Read from the cache: OpenAI's prompt_tokens_details.cached_tokens, Anthropic's cache_read_input_tokens. */
  cached_prompt_tokens?: number;
  /** Written to the cache for 5 minutes: Anthropic's cache_creation_input_tokens (ephemeral_5m_input_tokens). */
  cache_write_tokens?: number;
  /** Written to the cache for 1 hour: Anthropic's cache_creation.ephemeral_1h_input_tokens. */
  cache_write_1h_tokens?: number;
}

/**
 * Token counts as providers report them (and as the gateway counts them when a provider reports none).
 * prompt_tokens is the whole input, cached and written tokens included (as OpenAI counts it).
 */
export interface Usage extends CacheTokens {
  prompt_tokens: number;
  completion_tokens: number;
}

/** The client's request after validation: OpenAI chat-completions shape, extra fields kept. */
export type ChatRequest = Record<string, unknown> & {
  model: string;
  messages: unknown[];
  max_tokens?: number;
  /** OpenAI's newer name for the completion cap (reasoning models accept only it); same meaning here. */
  max_completion_tokens?: number;
  stream?: boolean;
  n?: number;
  stream_options?: { include_usage?: boolean };
};

/** What an adapter needs to shape one upstream call. */
export interface UpstreamParams {
  model: Model;
  body: ChatRequest;
  stream: boolean;
  /** Clamped to the model's maximum output; always sent so the charge cannot outgrow the hold. */
  maxTokens: number;
}

/** One upstream call, ready for fetch. */
export interface UpstreamRequest {
  url: string;
  init: RequestInit;
  /**
   * Prompt tokens the provider adds that are not in the body (Anthropic's tool-use system prompt, OpenAI's
   * rendering of tools and response schemas), so the reserve's prompt bound (tariff/hold.ts) still covers them.
   */
  hiddenPromptTokens?: number;
  /**
   * The provider may write the prompt to its cache without a breakpoint in the body (OpenAI caches on its own; its
   * GPT-6 family bills the write), so the hold takes the cache-write prices whatever the body carries.
   */
  cachesUnasked?: boolean;
}

/** A non-streaming answer translated to OpenAI shape. */
export interface ParsedCompletion {
  /** Response body for the client (OpenAI JSON). */
  json: string;
  usage: Usage | null;
  /** Generated text (content, reasoning, tool-call names and arguments), to count when the provider gave no usage; may be empty when it did. */
  generated: string;
  /** `json` as an object when the adapter built or parsed it (a front door reads it instead of parsing `json`). */
  answer?: object;
}

/** One upstream stream event translated to OpenAI shape. */
export interface StreamStep {
  /** OpenAI chunk JSON to send on, if any. */
  chunk?: string;
  /** The provider's final usage for the whole answer. */
  usage?: Usage;
  /** Prompt tokens the provider reported before the end (Anthropic's message_start): exact even if the client leaves early. */
  promptTokens?: number;
  /** Of promptTokens, those read from or written to the provider's cache (billed at their own prices). */
  promptCache?: CacheTokens;
  /** Text generated in this event, for counting when the final usage never comes. */
  generated?: string;
  /** The provider signalled the end of its answer. */
  done?: boolean;
  /** The provider reported an error inside the stream. */
  failed?: boolean;
  /** The SSE event name `chunk` is sent under (a client reading the provider's own events); none for chat chunks. */
  event?: string;
  /**
   * The chunk as an object, from a translator opened for a front door (openStream's `door`): the door reads it
   * instead of parsing `chunk` again (openai/wire.ts ChatCompletionChunk, or a StreamErrorEvent), and `chunk` may
   * then be left out.
   */
  parsed?: object;
}

/**
 * Translates one upstream stream, SSE data payload by payload. A new one per stream, because a dialect may need
 * what earlier events said (Anthropic: message id and input tokens from message_start, tool-call positions).
 */
export interface StreamTranslator {
  (payload: string): StreamStep;
  /**
   * The text generated so far that no step reported, for counting when the final usage never comes: a dialect
   * may keep output aside unread (its JSON is not needed while usage may still come). Empty once usage came.
   */
  generated?(): string;
  /**
   * The stream relayed as the provider's own bytes (a chat client reading the provider's own format): a new
   * relay per stream, whose payloads go to this translator. None where every event must be re-encoded.
   */
  relay?(): SseRelay;
}

/** One upstream wire dialect: request mapping and response translation (providers/<type>/). */
export interface ProviderAdapter {
  /** Shapes the upstream call; throws ApiError VALIDATION_ERROR for a request the dialect cannot express. */
  request(p: UpstreamParams): UpstreamRequest;
  /**
   * Translates a 2xx JSON body; throws on a body that is not an answer. `modelId` is the model name (catalog id or alias) the client
   * asked for: the answer names it, not the provider's own model name.
   */
  parse(text: string, modelId: string): ParsedCompletion;
  /**
   * Starts translating one stream; `includeUsage` says whether the client asked for the usage chunk. `door`: the
   * chunks go to a front door's DoorStream, which needs each one's object (StreamStep.parsed), not its text.
   */
  openStream(includeUsage: boolean, modelId: string, door?: boolean): StreamTranslator;
  /** The spec's error for a non-2xx upstream answer; its body is read only to classify, never passed on. */
  upstreamError(status: number, body: string): ApiError;
  /**
   * Set when the client reads the provider's own format rather than chat completions (a front door's native
   * path): what the gateway itself writes to it. Chat's frames and usage object otherwise.
   */
  clientFormat?: ClientFormat;
}

/** What the gateway writes to a client besides the provider's answer: a stream's last frames, a counted usage. */
export interface ClientFormat {
  /** After the provider's own end of the stream (chat: `data: [DONE]`; empty where the last event ends it). */
  done: Uint8Array;
  /** A provider failure mid-stream: a fixed message, never the provider's detail (chat: a StreamErrorEvent, [DONE]). */
  failed: Uint8Array;
  /** The stream was stopped at the gateway's time cap, charged for what it produced (chat: [DONE]). */
  cut: Uint8Array;
  /** The answer's `usage` field when the provider reported none and the gateway counted what it bills (`charge` µUSDC). */
  usage(u: Usage, charge: number): unknown;
}

/**
 * A front door's translation of one chat stream (modules/chat/chat.service.ts AnswerShape), run inside the metered
 * stream, so the chat SSE is never encoded, read back and parsed again as a stream of its own: what a chat client
 * would read → what the door's client reads. Never throws: what it cannot read ends its stream the way its API
 * reports a failure.
 */
export interface DoorStream {
  /** What the door sends first (may be empty); it leaves with the first read's text. */
  open(): string;
  /**
   * One `data:` payload of the chat SSE, in order (chunk JSON, the usage chunk, a StreamErrorEvent, `[DONE]` last),
   * → the door's SSE text for it (may be empty; empty for anything after the door's own end). A chunk the
   * translator already parsed comes as its object (StreamStep.parsed).
   */
  next(payload: string | object): string;
  /**
   * The answer's charge is queued on the ledger (its settle submitted, not yet sent when a batch is in flight): the
   * door's own Redis writes sent now leave in the same write as the settle (Ledger.alongside). Called once, only
   * for a stream that ends well, before its last frames leave; the door's end may come before or after it.
   */
  settled?(): void;
}
