import type { Model } from "./catalog.ts";
import type { Usage } from "./pricing.ts";

/** The client's request after validation: OpenAI chat-completions shape, extra fields kept. */
export type ChatRequest = Record<string, unknown> & {
  model: string;
  messages: unknown[];
  max_tokens?: number;
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

/** A non-streaming answer translated to OpenAI shape. */
export interface ParsedCompletion {
  /** Response body for the client (OpenAI JSON). */
  json: string;
  usage: Usage | null;
  /** Generated text (content, tool-call arguments), to count tokens when the provider gave no usage. */
  generated: string;
}

/** One upstream stream event translated to OpenAI shape. */
export interface StreamStep {
  /** OpenAI chunk JSON to send on, if any. */
  chunk?: string;
  /** Usage reported by this event; `usageOnly` marks the dedicated usage chunk (choices empty). */
  usage?: Usage;
  usageOnly?: boolean;
  /** Text generated in this event, for counting when usage never comes. */
  generated?: string;
  /** The provider signalled the end of its answer. */
  done?: boolean;
  /** The provider reported an error inside the stream. */
  failed?: boolean;
}

/** One upstream wire dialect: request mapping and response translation (providers/<type>/). */
export interface ProviderAdapter {
  request(p: UpstreamParams): { url: string; init: RequestInit };
  parse(text: string): ParsedCompletion;
  /** Decodes one SSE data payload; returns a step. */
  streamStep(payload: string, includeUsage: boolean): StreamStep;
}
