import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { expect } from "bun:test";
import type { TestGateway } from "./gateway.ts";

/** The gateway's OpenAPI document, and a check of live answers against it. */
export interface Conformance {
  doc: any;
  /** ajv holding the document as "openapi.json": `ajv.getSchema("openapi.json#/components/schemas/X")`. */
  ajv: Ajv2020;
  /** The documented operation of a concrete path (`/v1/balance/0x…` matches `/v1/balance/{wallet}`). */
  operation(method: string, path: string): [string, any];
  /** Checks an answer's status, media type, body schema and required headers against the document; returns the body. */
  conforms(method: string, path: string, res: Response): Promise<any>;
}

const pointer = (...parts: string[]) => parts.map((p) => p.replaceAll("~", "~0").replaceAll("/", "~1")).join("/");

export async function conformance(gw: TestGateway): Promise<Conformance> {
  const res = await gw.call("GET", "/docs/json");
  expect(res.status).toBe(200);
  const doc = res.body;
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  ajv.addSchema(doc, "openapi.json");

  const operation = (method: string, path: string): [string, any] => {
    const bare = path.split("?")[0]!;
    for (const [template, item] of Object.entries<any>(doc.paths)) {
      const re = new RegExp(`^${template.replace(/\{[^}]+\}/g, "[^/]+")}$`);
      if (re.test(bare) && item[method.toLowerCase()]) return [template, item[method.toLowerCase()]];
    }
    throw new Error(`${method} ${bare} is not documented`);
  };

  const conforms = async (method: string, path: string, res: Response) => {
    const [template, op] = operation(method, path);
    const status = String(res.status);
    const documented = op.responses?.[status];
    if (!documented) throw new Error(`${method} ${template} answered ${status}, which the document does not list`);
    const type = (res.headers.get("content-type") ?? "").split(";")[0]!.trim();
    const media = documented.content?.[type];
    if (!media) throw new Error(`${method} ${template} ${status}: media type ${type} not documented`);
    const text = await res.text();
    const body = type === "application/json" ? JSON.parse(text) : text;
    const validator = ajv.getSchema(
      `openapi.json#/${pointer("paths", template, method.toLowerCase(), "responses", status, "content", type, "schema")}`,
    )!;
    if (!validator(body)) throw new Error(`${method} ${template} ${status}: ${ajv.errorsText(validator.errors)}\n${text.slice(0, 500)}`);
    for (const [name, ref] of Object.entries<any>(documented.headers ?? {})) {
      const header = ref.$ref ? doc.components.headers[ref.$ref.split("/").at(-1)] : ref;
      if (header.required) expect([name, res.headers.has(name)]).toEqual([name, true]);
    }
    return body;
  };
  return { doc, ajv, operation, conforms };
}
