/** The Messages endpoint, appended to the catalog's baseUrl (`https://api.anthropic.com/v1`). */
export const MESSAGES_PATH = "/messages";

/** The API version every request pins; response shapes below are the ones this version documents. */
export const ANTHROPIC_VERSION = "2023-06-01";

/** Request headers: Anthropic authenticates with x-api-key, not a bearer token (none for a keyless stand-in). */
export function anthropicHeaders(apiKey: string | undefined): Record<string, string> {
  const headers: Record<string, string> = { "content-type": "application/json", "anthropic-version": ANTHROPIC_VERSION };
  if (apiKey) headers["x-api-key"] = apiKey;
  return headers;
}
