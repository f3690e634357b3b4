/** The Messages endpoint, appended to the catalog's baseUrl (`https://api.anthropic.com/v1`). */
export const MESSAGES_PATH = "/messages";

/** The API version every request pins; response shapes below are the ones this version documents. */
export const ANTHROPIC_VERSION = "2023-06-01";

/** Request headers: Anthropic authenticates with x-api-key, not a bearer token. */
export function anthropicHeaders(apiKey: string): Record<string, string> {
  return { "content-type": "application/json", "x-api-key": apiKey, "anthropic-version": ANTHROPIC_VERSION };
}
