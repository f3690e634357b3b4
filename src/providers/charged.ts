/**
 * `charge_usdc` (µUSDC charged for the request) put into the `usage` object of an answer's or an event's JSON text,
 * whatever its API (chat, a provider's Messages answer or message_delta): as text, right after the one `"usage":{`
 * of the text (a `"usage"` inside a string is escaped and never matches), so the answer is not serialised again;
 * otherwise (none, several, another layout, a charge already there) the JSON is parsed and written again. Text without a usage object
 * comes back as it was.
 */
export function withCharge(json: string, charge: number): string {
  const at = json.indexOf('"usage":{');
  // An upstream that is itself a gateway may have sent a charge of its own: the parse below replaces it.
  if (at !== -1 && json.indexOf('"usage":{', at + 9) === -1 && !json.includes('"charge_usdc"')) {
    const after = at + 9;
    const field = `"charge_usdc":${charge}`;
    return json.slice(0, after) + (json.charCodeAt(after) === 125 ? field : field + ",") + json.slice(after);
  }
  if (!json.includes('"usage"')) return json;
  const obj = JSON.parse(json) as { usage?: unknown };
  if (!obj || typeof obj.usage !== "object" || obj.usage === null) return json;
  (obj.usage as Record<string, unknown>).charge_usdc = charge;
  return JSON.stringify(obj);
}
