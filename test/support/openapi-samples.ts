// Reading the control plane's OpenAPI document to make requests from it: a
// plausible value for a schema, the string-typed places inside a body, and
// setting a value at a path. Used by the route walk
// (control-plane/src/http/route-walk.test.ts) and the malformed-request run
// (test/system/malformed-requests.test.ts).

export type JsonSchema = {
  type?: string | string[]; properties?: Record<string, JsonSchema>; items?: JsonSchema; format?: string; enum?: unknown[]; anyOf?: JsonSchema[];
  pattern?: string; const?: unknown; default?: unknown; minLength?: number; maxLength?: number; required?: string[];
};
export interface Parameter { name: string; in: 'path' | 'query' | 'header'; schema: JsonSchema; required?: boolean }
export interface Operation { parameters?: Parameter[]; requestBody?: { content: Record<string, { schema: JsonSchema }> }; security?: unknown[] }
export interface OpenApiDocument { paths: Record<string, Record<string, Operation>> }

/** Every operation of the document, method upper-cased. */
export function operationsOf(doc: OpenApiDocument): { method: string; path: string; op: Operation }[] {
  return Object.entries(doc.paths).flatMap(([path, methods]) => Object.entries(methods).map(([method, op]) => ({ method: method.toUpperCase(), path, op })));
}

/** A plausible value for a schema (valid where easy); only used around the one malformed value of a request. */
export function sample(schema: JsonSchema | undefined, depth = 0): unknown {
  if (!schema || depth > 4) return 'x';
  if (schema.const !== undefined) return schema.const;
  if (schema.enum?.length) return schema.enum[0];
  if (schema.anyOf?.length) return sample(schema.anyOf.find((s) => s.type !== 'null') ?? schema.anyOf[0], depth + 1);
  const type = Array.isArray(schema.type) ? schema.type.find((x) => x !== 'null') : schema.type;
  switch (type) {
    case 'object': return Object.fromEntries(Object.entries(schema.properties ?? {}).map(([k, v]) => [k, sample(v, depth + 1)]));
    case 'array': return [sample(schema.items, depth + 1)];
    case 'integer': case 'number': return 1;
    case 'boolean': return true;
    default:
      if (schema.format === 'email') return 'walker@example.com';
      if (schema.format === 'uuid') return crypto.randomUUID();
      if (schema.format === 'date-time') return new Date().toISOString();
      // Meets the usual text rules (and the password policy) within the length bounds.
      return 'Walker-Sample-42x'.padEnd(schema.minLength ?? 0, 'x').slice(0, Math.max(schema.minLength ?? 0, Math.min(schema.maxLength ?? 17, 17)));
  }
}

/** Every string-typed location inside a body schema, as paths. */
export function stringPaths(schema: JsonSchema | undefined, path: string[] = [], out: string[][] = [], depth = 0): string[][] {
  if (!schema || depth > 4) return out;
  const types = Array.isArray(schema.type) ? schema.type : [schema.type];
  if (types.includes('string')) out.push(path);
  for (const [key, member] of Object.entries(schema.properties ?? {})) stringPaths(member, [...path, key], out, depth + 1);
  for (const option of schema.anyOf ?? []) stringPaths(option, path, out, depth + 1);
  return out;
}

export function setPath(target: unknown, path: string[], value: unknown): unknown {
  if (!path.length) return value;
  const copy = { ...(target && typeof target === 'object' ? target : {}) } as Record<string, unknown>;
  copy[path[0]!] = setPath(copy[path[0]!], path.slice(1), value);
  return copy;
}
