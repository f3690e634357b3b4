/**
 * Anthropic's Messages API wire shapes (the version pinned in api.ts): the request the adapter builds, the answer
 * and stream events it reads, the error body it classifies, as that version documents them. JSON.parse checks
 * none of it: readers test each field they rely on, and the parts an answer may lack are optional.
 */

/** A prompt-caching breakpoint: the prefix up to this block is cached (5 minutes unless `ttl` says 1h). */
export interface CacheControl {
  type: "ephemeral";
  ttl?: "5m" | "1h";
}

/** Plain text; Anthropic refuses an empty one. */
export interface TextBlock {
  type: "text";
  text: string;
  cache_control?: CacheControl;
}

/** An image, inline (base64 from a data: URL) or by URL. */
export interface ImageBlock {
  type: "image";
  source: { type: "base64"; media_type: string; data: string } | { type: "url"; url: string };
  cache_control?: CacheControl;
}

/** A tool call of an assistant turn. */
export interface ToolUseBlock {
  type: "tool_use";
  id: string;
  name: string;
  input: object;
  cache_control?: CacheControl;
}

/** A tool's answer, in a user turn; it may only carry text and images. */
export interface ToolResultBlock {
  type: "tool_result";
  tool_use_id: string;
  content?: string | (TextBlock | ImageBlock)[];
  /** The tool failed (a client of the gateway's Messages API may say so; the chat dialect has no such flag). */
  is_error?: boolean;
  cache_control?: CacheControl;
}

/** Signed reasoning; sent back verbatim when a tool-use conversation continues. */
export interface ThinkingBlock {
  type: "thinking";
  thinking: string;
  signature: string;
}

/** Reasoning the provider encrypted; sent back verbatim like ThinkingBlock. */
export interface RedactedThinkingBlock {
  type: "redacted_thinking";
  data: string;
}

/** What a request's turn may hold. */
export type ContentBlock = TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock;

/** One turn; roles alternate, and a single text block may be sent as a plain string. */
export interface MessageParam {
  role: "user" | "assistant";
  content: string | ContentBlock[];
}

/** A client tool (a JSON-schema function). */
export interface Tool {
  name: string;
  description?: string;
  input_schema: unknown;
  cache_control?: CacheControl;
}

/** How the model may use tools: auto, any ("required"), none, or one named tool. */
export type ToolChoice = ({ type: "auto" } | { type: "any" } | { type: "none" } | { type: "tool"; name: string }) & {
  disable_parallel_tool_use?: boolean;
};

/** Extended thinking: with a token budget (3.7 up to 4.6) or adaptive (4.6 on, effort in output_config). */
export type ThinkingConfig = { type: "enabled"; budget_tokens: number } | { type: "adaptive" } | { type: "disabled" };

/** A Messages API request, as the adapter sends it (Anthropic refuses fields it does not know). */
export interface MessagesRequest {
  model: string;
  max_tokens: number;
  messages: MessageParam[];
  system?: string | TextBlock[];
  stream?: true;
  stop_sequences?: string[];
  tools?: Tool[];
  tool_choice?: ToolChoice;
  thinking?: ThinkingConfig;
  output_config?: { effort: string };
  temperature?: number;
  top_p?: number;
  top_k?: number;
  metadata?: { user_id: string };
}

/** Token usage; input_tokens excludes cached input, which the cache fields count. */
export interface Usage {
  input_tokens?: number;
  output_tokens?: number;
  cache_creation_input_tokens?: number | null;
  cache_read_input_tokens?: number | null;
  /** The cache writes by lifetime (their sum is cache_creation_input_tokens); absent: all are 5-minute writes. */
  cache_creation?: { ephemeral_5m_input_tokens?: number | null; ephemeral_1h_input_tokens?: number | null } | null;
}

/** A block of an answer the adapter translates; server-tool blocks (web search and the like) are skipped. */
export type ResponseBlock = TextBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock;

/** A complete (non-streaming) answer. */
export interface Message {
  id?: string;
  type?: string;
  content?: ResponseBlock[];
  stop_reason?: string | null;
  usage?: Usage;
}

/** A content block's increment in a stream. */
export type BlockDelta =
  | { type: "text_delta"; text?: string }
  | { type: "input_json_delta"; partial_json?: string }
  | { type: "thinking_delta"; thinking?: string }
  | { type: "signature_delta"; signature?: string };

/** The stream's events, in the order they come; event types added later carry nothing the adapter forwards. */
export type StreamEvent =
  | { type: "message_start"; message?: Pick<Message, "id" | "usage"> }
  | { type: "content_block_start"; index?: number; content_block?: ResponseBlock }
  | { type: "content_block_delta"; index?: number; delta?: BlockDelta }
  | { type: "content_block_stop"; index?: number }
  | { type: "message_delta"; delta?: { stop_reason?: string | null }; usage?: Usage }
  | { type: "message_stop" }
  | { type: "ping" }
  | { type: "error"; error?: ErrorDetail };

/** What an error names: its type decides the spec's error; the message is never passed on. */
export interface ErrorDetail {
  type?: string;
  message?: string;
}

/** A non-2xx answer's body. */
export interface ErrorBody {
  type?: "error";
  error?: ErrorDetail;
}

/**
 * What a client of the gateway's own Messages API (`POST /v1/messages`) may send: the request above as clients
 * build it (a string or text blocks as system, blocks with cache_control), checked field by field on reading.
 */
export interface ClientMessagesRequest {
  model?: unknown;
  max_tokens?: unknown;
  system?: unknown;
  messages?: unknown;
  tools?: unknown;
  tool_choice?: unknown;
  thinking?: unknown;
  stop_sequences?: unknown;
  temperature?: unknown;
  top_p?: unknown;
  top_k?: unknown;
  metadata?: { user_id?: unknown } | null;
  output_config?: { effort?: unknown; format?: { type?: unknown; schema?: unknown } | null } | null;
  stream?: unknown;
  [field: string]: unknown;
}

/** A client's content block, any type: read by its `type`, the fields that type has tested before use. */
export interface ClientBlock {
  type?: unknown;
  text?: unknown;
  source?: { type?: unknown; media_type?: unknown; data?: unknown; url?: unknown };
  id?: unknown;
  name?: unknown;
  input?: unknown;
  tool_use_id?: unknown;
  content?: unknown;
  is_error?: unknown;
  thinking?: unknown;
  signature?: unknown;
  data?: unknown;
  cache_control?: unknown;
}

/** A Messages API answer as the gateway writes it for its own clients. */
export interface MessageAnswer {
  id: string;
  type: "message";
  role: "assistant";
  model: string;
  content: Record<string, unknown>[];
  stop_reason: string | null;
  stop_sequence: string | null;
  usage: {
    input_tokens: number;
    output_tokens: number;
    cache_creation_input_tokens: number;
    cache_read_input_tokens: number;
    /** What the gateway charged for the request, µUSDC (absent only before it is known). */
    charge_usdc?: number;
  };
}
