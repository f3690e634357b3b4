/**
 * The reserve formula (src/tariff/hold.ts) on its own: what each kind of input adds to the hold, the caps,
 * and the cases that fall back to the context window. Models come from the real catalog parser.
 */
import { describe, expect, test } from "bun:test";
import { parseCatalog } from "../src/providers/catalog.ts";
import { openaiAdapter } from "../src/providers/openai/adapter.ts";
import { billedMicro } from "../src/tariff/index.ts";
import { reserveFor } from "../src/tariff/hold.ts";
import type { ChatRequest } from "../src/providers/types.ts";
import { mediaTokensOf, usageFor } from "./helpers/openaiStandin.ts";

const base = {
  contextLength: 100_000,
  maxOutputTokens: 4_096,
  promptPricePer1MTokens: 2.5,
  completionPricePer1M: 10,
  costPromptPer1M: 2,
  costCompletionPer1M: 8,
};
const { models } = parseCatalog(
  {
    providers: {
      oa: { type: "openai", baseUrl: "https://example.test/v1", apiKeyEnv: "K" },
      an: { type: "anthropic", baseUrl: "https://example.test/v1", apiKeyEnv: "K" },
    },
    models: [
      { ...base, id: "oa/plain", provider: "oa", upstreamModel: "plain", name: "plain" },
      { ...base, id: "oa/tiles", provider: "oa", upstreamModel: "tiles", name: "tiles", imageTokens: { low: 85, high: 1_445 } },
      { ...base, id: "an/claude", provider: "an", upstreamModel: "claude", name: "claude", imageTokens: { low: 1_600, high: 1_600 } },
      { ...base, id: "an/bare", provider: "an", upstreamModel: "bare", name: "bare" },
    ],
  },
  { K: "k" },
);
const plain = models.get("oa/plain")!;
const tiles = models.get("oa/tiles")!;
const claude = models.get("an/claude")!;
const bareClaude = models.get("an/bare")!;

const req = (body: Record<string, unknown>) => ({ model: "m", messages: [{ role: "user", content: "hi" }], ...body }) as ChatRequest;
const bytes = (s: string) => Buffer.byteLength(s);
const image = (url: string, detail?: string) => ({ type: "image_url", image_url: detail ? { url, detail } : { url } });

describe("reserveFor: text", () => {
  test("prompt = bytes of the upstream body + 8 + hidden tokens; completion = max_tokens; micro at the billed prices", () => {
    const body = req({ max_tokens: 100 });
    const upstream = JSON.stringify(body);
    const r = reserveFor(plain, body, upstream, 600);
    expect(r.promptTokens).toBe(bytes(upstream) + 8 + 600);
    expect(r.completionTokens).toBe(100);
    expect(r.micro).toBe(billedMicro(plain, { prompt_tokens: bytes(upstream) + 608, completion_tokens: 100 }));
    expect(r.unbounded).toBe(false);
    expect(r.shape).toEqual({ messages: 1, images: 0, audio: 0, files: 0, otherParts: 0, tools: 0, choices: 1 });
  });

  test("multi-byte text counts its UTF-8 bytes", () => {
    const body = req({ messages: [{ role: "user", content: "Zürich 🚀" }] });
    const upstream = JSON.stringify(body);
    expect(reserveFor(plain, body, upstream).promptTokens).toBe(bytes(upstream) + 8);
    expect(bytes(upstream)).toBeGreaterThan(upstream.length);
  });

  test("the prompt bound never exceeds the context window", () => {
    const body = req({ messages: [{ role: "user", content: "x".repeat(150_000) }] });
    expect(reserveFor(plain, body, JSON.stringify(body), 600).promptTokens).toBe(100_000);
  });

  test("completion: default 1024, max_completion_tokens, clamped to the model's output, times n", () => {
    const r = (b: Record<string, unknown>) => reserveFor(plain, req(b), "{}").completionTokens;
    expect(r({})).toBe(1024);
    expect(r({ max_completion_tokens: 300 })).toBe(300);
    expect(r({ max_tokens: 1_000_000 })).toBe(4_096);
    expect(r({ max_tokens: 200, n: 3 })).toBe(600);
    expect(r({ max_tokens: 1_000_000, n: 2 })).toBe(8_192);
    expect(reserveFor(plain, req({ n: 3 }), "{}").shape.choices).toBe(3);
  });

  test("tools and functions are counted in the shape (their bytes are in the body)", () => {
    const tool = { type: "function", function: { name: "f", parameters: {} } };
    const body = req({ tools: [tool, tool], functions: [{ name: "g" }] });
    expect(reserveFor(plain, body, JSON.stringify(body)).shape.tools).toBe(3);
  });
});

describe("reserveFor: images are billed by pixels, not bytes", () => {
  const dataUrl = "data:image/png;base64," + "A".repeat(200_000);

  test("a URL's bytes are replaced by the model's maximum for the detail; auto and absent bill as high", () => {
    const url = "https://img.example/cat.png";
    const parts = [image(url, "low"), image(url, "high"), image(url, "auto"), image(url)];
    const body = req({ messages: [{ role: "user", content: [{ type: "text", text: "what is it?" }, ...parts] }] });
    const upstream = JSON.stringify(body);
    const r = reserveFor(tiles, body, upstream);
    expect(r.promptTokens).toBe(bytes(upstream) - 4 * url.length + 8 + 85 + 3 * 1_445);
    expect(r.shape.images).toBe(4);
    expect(r.unbounded).toBe(false);
  });

  test("a data URL's base64 is taken off (the prefix stays counted): a 200 kB image does not hold 200k tokens", () => {
    const body = req({ messages: [{ role: "user", content: [image(dataUrl, "high")] }] });
    const upstream = JSON.stringify(body);
    const r = reserveFor(tiles, body, upstream);
    expect(r.promptTokens).toBe(bytes(upstream) - 200_000 + 8 + 1_445);
    expect(r.promptTokens).toBeLessThan(2_000);
  });

  test("the Anthropic dialect's body carries only the base64: the same subtraction holds", () => {
    const body = req({ messages: [{ role: "user", content: [image(dataUrl)] }] });
    const upstream = JSON.stringify({
      model: "claude",
      max_tokens: 1024,
      messages: [
        { role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "A".repeat(200_000) } }] },
      ],
    });
    const r = reserveFor(claude, body, upstream);
    expect(r.promptTokens).toBe(bytes(upstream) - 200_000 + 8 + 1_600);
    expect(r.promptTokens).toBeGreaterThan(1_600);
  });

  test("a model without imageTokens in the catalog has no known maximum: an image holds the context window, whatever the provider type", () => {
    const body = req({ max_tokens: 10, messages: [{ role: "user", content: [{ type: "text", text: "hi" }, image("u", "low")] }] });
    const upstream = JSON.stringify(body);
    for (const model of [plain, bareClaude]) {
      const r = reserveFor(model, body, upstream);
      expect(r).toMatchObject({ promptTokens: 100_000, completionTokens: 10, unbounded: true });
      expect(r.shape.images).toBe(1);
    }
    // Without images the same models are bounded by their bytes.
    expect(reserveFor(plain, req({}), JSON.stringify(req({}))).unbounded).toBe(false);
  });

  test("images in tool messages count too; many images are still capped by the context window", () => {
    const body = req({ messages: [{ role: "tool", tool_call_id: "t", content: Array.from({ length: 100 }, () => image("u")) }] });
    const r = reserveFor(tiles, body, JSON.stringify(body));
    expect(r.shape.images).toBe(100);
    expect(r.promptTokens).toBe(100_000); // 144,500 tokens of images > the window
  });
});

// The chat route refuses audio, file and unknown parts before the reserve (parts.ts, chat.security.test.ts);
// reserveFor still bounds them by the context window, a second line should one get past.
describe("reserveFor: inputs the gateway cannot bound hold the context window", () => {
  const cases: [string, Record<string, unknown>, keyof ReturnType<typeof reserveFor>["shape"]][] = [
    ["an input_audio part", { type: "input_audio", input_audio: { data: "AAAA", format: "wav" } }, "audio"],
    ["a file part", { type: "file", file: { file_id: "file-1" } }, "files"],
    ["a part of an unknown type", { type: "video_url", video_url: { url: "u" } }, "otherParts"],
  ];
  for (const [name, part, counter] of cases) {
    test(name, () => {
      const body = req({ max_tokens: 10, messages: [{ role: "user", content: [{ type: "text", text: "hi" }, part] }] });
      const r = reserveFor(tiles, body, JSON.stringify(body));
      expect(r).toMatchObject({ promptTokens: 100_000, completionTokens: 10, unbounded: true });
      expect(r.shape[counter]).toBe(1);
      expect(r.micro).toBe(billedMicro(tiles, { prompt_tokens: 100_000, completion_tokens: 10 }));
    });
  }

  test("an image of a detail level the gateway does not know", () => {
    const body = req({ messages: [{ role: "user", content: [image("u", "low"), image("u", "original")] }] });
    const r = reserveFor(tiles, body, JSON.stringify(body));
    expect(r).toMatchObject({ promptTokens: 100_000, unbounded: true });
    expect(r.shape.images).toBe(2);
  });

  test("an assistant message that refers to an earlier audio answer", () => {
    const body = req({
      messages: [
        { role: "assistant", content: null, audio: { id: "audio_1" } },
        { role: "user", content: "and?" },
      ],
    });
    expect(reserveFor(plain, body, JSON.stringify(body))).toMatchObject({ promptTokens: 100_000, unbounded: true });
  });
});

describe("reserveFor covers what the stand-ins bill", () => {
  test("any mix of images and text, through the real OpenAI adapter: the bound is at least the billed prompt", () => {
    const model = tiles;
    for (let n = 0; n < 50; n++) {
      const content = Array.from({ length: n % 7 }, (_, i) => ({
        type: "image_url",
        image_url: { url: `https://i/${i}`, detail: ["low", "high", "auto"][(n + i) % 3] },
      }));
      const body = req({ messages: [{ role: "user", content: [{ type: "text", text: "x" }, ...content] }], n: 1 + (n % 3) });
      const { init, hiddenPromptTokens } = openaiAdapter.request({ model, body, stream: n % 2 === 0, maxTokens: 1024 });
      const r = reserveFor(model, body, init.body as string, hiddenPromptTokens);
      expect(r.promptTokens).toBeGreaterThanOrEqual(usageFor(1, mediaTokensOf(body.messages)).prompt_tokens);
    }
  });
});
