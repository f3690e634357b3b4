import { ApiError } from "../../errors.ts";
import type { Model } from "../catalog.ts";
import { upstreamStatusError } from "../errors.ts";
import type { ChatRequest, ClientFormat, ProviderAdapter } from "../types.ts";

/** The most inputs one request may carry (OpenAI's own limit per embeddings request). */
const MAX_INPUTS = 2048;
const EMBEDDINGS_PATH = "/embeddings";

/** POST /v1/embeddings as OpenAI defines it, checked (only these fields reach the provider). */
export interface EmbeddingsRequest {
  model: string;
  /** The texts to embed, always a list here (a single string is a list of one). */
  inputs: string[];
  /** The request's `input` as the client sent it (a string or a list), forwarded as it came. */
  input: string | string[];
  encoding_format?: "float" | "base64";
  dimensions?: number;
  user?: string;
}

const invalid = (message: string) => new ApiError({ code: "VALIDATION_ERROR", message });

/**
 * Checks an embeddings request: `model` a string; `input` a non-empty string or a list of 1..2048 non-empty strings
 * (token arrays are not accepted: the gateway bounds a hold by text); `encoding_format` float or base64;
 * `dimensions` a positive integer; `user` a string. Any other field is not forwarded. 400 VALIDATION_ERROR naming
 * the field otherwise.
 */
export function checkEmbeddingsRequest(body: unknown): EmbeddingsRequest {
  if (!body || typeof body !== "object" || Array.isArray(body)) throw invalid("Body must be a JSON object");
  const b = body as Record<string, unknown>;
  if (typeof b.model !== "string" || b.model === "") throw invalid("model: Required (a catalog model id)");
  const input = b.input;
  const inputs = typeof input === "string" ? [input] : Array.isArray(input) ? input : undefined;
  if (!inputs || inputs.length === 0 || inputs.length > MAX_INPUTS) {
    throw invalid(`input: must be a string or a list of 1 to ${MAX_INPUTS} strings`);
  }
  for (const [i, s] of inputs.entries()) {
    if (typeof s !== "string" || s === "") throw invalid(`input[${i}]: must be a non-empty string (token arrays are not accepted)`);
  }
  const req: EmbeddingsRequest = { model: b.model, inputs: inputs as string[], input: input as string | string[] };
  if (b.encoding_format !== undefined) {
    if (b.encoding_format !== "float" && b.encoding_format !== "base64") throw invalid('encoding_format: must be "float" or "base64"');
    req.encoding_format = b.encoding_format;
  }
  if (b.dimensions !== undefined) {
    if (typeof b.dimensions !== "number" || !Number.isSafeInteger(b.dimensions) || b.dimensions < 1) {
      throw invalid("dimensions: must be a positive integer");
    }
    req.dimensions = b.dimensions;
  }
  if (b.user !== undefined) {
    if (typeof b.user !== "string") throw invalid("user: must be a string");
    req.user = b.user;
  }
  return req;
}

/** The inputs as a chat-shaped request: what the tokenizer counts when a provider reports no usage. */
export function countedInputs(req: EmbeddingsRequest): ChatRequest {
  return { model: req.model, messages: req.inputs.map((content) => ({ role: "user", content })) };
}

/** The provider call of an embeddings request: OpenAI's wire format, the upstream model name, the checked fields. */
export function embeddingsUpstream(model: Model, req: EmbeddingsRequest): { url: string; init: RequestInit } {
  const { inputs: _inputs, ...fields } = req;
  return {
    url: model.provider.baseUrl + EMBEDDINGS_PATH,
    init: {
      method: "POST",
      // A keyless provider (a local server) gets no Authorization header at all.
      headers: model.provider.apiKey
        ? { "content-type": "application/json", authorization: `Bearer ${model.provider.apiKey}` }
        : ({ "content-type": "application/json" } as Record<string, string>),
      body: JSON.stringify({ ...fields, model: model.upstreamModel }),
    },
  };
}

/** An embeddings answer's usage as OpenAI writes it (no completion), with what it was charged. */
const EMBEDDINGS_FORMAT: ClientFormat = {
  done: new Uint8Array(),
  failed: new Uint8Array(),
  cut: new Uint8Array(),
  usage: (u, charge) => ({ prompt_tokens: u.prompt_tokens, total_tokens: u.prompt_tokens, charge_usdc: charge }),
};

/**
 * The embeddings dialect of an OpenAI-compatible provider: its JSON answer is passed on (the `model` it names
 * replaced by the catalog id asked for), billed by its `usage.prompt_tokens`. Embeddings never stream.
 */
export const embeddingsAdapter: ProviderAdapter = {
  request() {
    throw new Error("embeddings requests are shaped by embeddingsUpstream");
  },
  parse(text, modelId) {
    const obj = JSON.parse(text) as { data?: unknown; model?: unknown; usage?: { prompt_tokens?: unknown } };
    if (!obj || !Array.isArray(obj.data)) throw new Error("upstream body has no data");
    const pt = obj.usage?.prompt_tokens;
    const usage = typeof pt === "number" && Number.isSafeInteger(pt) && pt >= 0 ? { prompt_tokens: pt, completion_tokens: 0 } : null;
    obj.model = modelId;
    return { json: JSON.stringify(obj), usage, generated: "", answer: obj };
  },
  openStream() {
    throw new Error("embeddings do not stream");
  },
  upstreamError: (status) => upstreamStatusError(status),
  clientFormat: EMBEDDINGS_FORMAT,
};
