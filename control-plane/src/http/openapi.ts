// OpenAPI 3.1 generated from the route declarations: the same zod schemas
// that validate requests describe them here, so the document cannot drift.
import { z } from 'zod';
import { errorStatus, MAX_FIELD_ERRORS, type ErrorCode } from './errors.ts';
import { allowedErrorCodes, type Responses, type RouteDefinition } from './route.ts';

type JsonSchema = Record<string, unknown>;

function toSchema(schema: z.ZodType, io: 'input' | 'output'): JsonSchema {
  const json = z.toJSONSchema(schema, { target: 'draft-2020-12', io, unrepresentable: 'any' }) as JsonSchema;
  delete json.$schema;
  return json;
}

function parameters(schema: z.ZodType | undefined, location: 'path' | 'query'): unknown[] {
  if (!schema) return [];
  const json = toSchema(schema, 'input');
  const properties = (json.properties ?? {}) as Record<string, JsonSchema>;
  const required = new Set((json.required ?? []) as string[]);
  return Object.entries(properties).map(([name, property]) => ({
    name,
    in: location,
    required: location === 'path' || required.has(name),
    ...(property.description ? { description: property.description } : {}),
    schema: property,
  }));
}

const errorBody: JsonSchema = {
  type: 'object',
  required: ['code', 'message', 'request_id'],
  properties: {
    code: { type: 'string' },
    message: { type: 'string' },
    request_id: { type: 'string' },
    errors: {
      type: 'array', maxItems: MAX_FIELD_ERRORS, description: `One entry per failing field, at most ${MAX_FIELD_ERRORS}`,
      items: { type: 'object', required: ['field', 'message'], properties: { field: { type: 'string' }, message: { type: 'string' } } },
    },
    errors_omitted: { type: 'integer', minimum: 1, description: `Present when more than ${MAX_FIELD_ERRORS} fields failed: how many entries were left out of errors` },
  },
};

/** A multipart body: its text fields (the body schema) and its file fields, as binary strings. */
function multipartSchema(route: RouteDefinition): JsonSchema {
  const fields = route.body ? toSchema(route.body, 'input') : { type: 'object', properties: {}, additionalProperties: false };
  const properties = { ...(fields.properties as Record<string, JsonSchema> | undefined) };
  const required = [...((fields.required as string[] | undefined) ?? [])];
  for (const [name, file] of Object.entries(route.multipart!.files)) {
    properties[name] = {
      type: 'string',
      format: 'binary',
      contentMediaType: 'application/octet-stream',
      description: [file.description, `At most ${route.multipart!.maxFileBytes} bytes.`].filter(Boolean).join(' '),
    };
    if (file.required) required.push(name);
  }
  return { ...fields, properties, ...(required.length ? { required } : {}) };
}

export function buildOpenApi(routes: RouteDefinition[], info: { title: string; version: string; serverUrl?: string }): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of routes) {
    const path = route.path.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
    const responses: Record<string, unknown> = {};
    let etagged = false;
    for (const [status, spec] of Object.entries(route.responses as Responses)) {
      etagged ||= Boolean(spec.etag);
      responses[status] = spec.kind === 'binary'
        ? {
          description: 'Success (bytes)',
          content: Object.fromEntries((spec.mediaTypes ?? []).map((type) => [type, { schema: { type: 'string', contentMediaType: type } }])),
        }
        : spec.schema
        ? {
          description: Number(status) < 400 ? 'Success' : 'Answer',
          ...(spec.etag ? { headers: { ETag: { description: 'Strong validator of this version', schema: { type: 'string' } } } } : {}),
          content: { 'application/json': { schema: toSchema(spec.schema, 'output') } },
        }
        : { description: 'Success (no body)' };
    }
    if (etagged && route.method === 'get') responses['304'] = { description: 'Not modified (If-None-Match holds the current ETag)' };
    const codes = allowedErrorCodes(route);
    const byStatus = new Map<number, ErrorCode[]>();
    for (const code of codes) byStatus.set(errorStatus[code], [...(byStatus.get(errorStatus[code]) ?? []), code]);
    for (const [status, list] of byStatus) {
      responses[String(status)] = { description: list.join(', '), content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } };
    }

    const headerParams: unknown[] = [];
    if (route.idempotent) headerParams.push({ name: 'Idempotency-Key', in: 'header', required: false, schema: { type: 'string', maxLength: 255 }, description: 'Replaying the same key within 24 hours returns the original result' });
    if (route.ifMatch) headerParams.push({ name: 'If-Match', in: 'header', required: false, schema: { type: 'string' }, description: 'ETag of the version last read; 412 when it no longer matches' });
    for (const header of route.headers ?? []) headerParams.push({ name: header.name, in: 'header', required: header.required ?? false, schema: { type: 'string' }, description: header.description });
    if (etagged && route.method === 'get') headerParams.push({ name: 'If-None-Match', in: 'header', required: false, schema: { type: 'string' }, description: 'ETag held by the client; 304 when it is still current' });

    const operation: Record<string, unknown> = {
      operationId: route.operationId ?? `${route.method}${path.replace(/[{}]/g, '').replace(/[^A-Za-z0-9]+(.)/g, (_, c: string) => c.toUpperCase())}`,
      summary: route.summary,
      ...(route.description ? { description: route.description } : {}),
      tags: route.tags,
      parameters: [...parameters(route.params, 'path'), ...parameters(route.query, 'query'), ...headerParams],
      responses,
      security: route.access === 'public' ? [] : [{ bearerAuth: [] }],
    };
    if (route.multipart) {
      const encoding = Object.fromEntries(Object.entries(route.multipart.files)
        .filter(([, file]) => file.mediaTypes?.length)
        .map(([name, file]) => [name, { contentType: file.mediaTypes!.join(', ') }]));
      operation.requestBody = {
        required: true,
        content: { 'multipart/form-data': { schema: multipartSchema(route), ...(Object.keys(encoding).length ? { encoding } : {}) } },
      };
    } else if (route.body) {
      // A declared example (schemas.ts withExample) is the media type's example: what "Try it out" prefills.
      const { example, ...schema } = toSchema(route.body, 'input');
      operation.requestBody = { required: true, content: { 'application/json': { schema, ...(example === undefined ? {} : { example }) } } };
    }
    paths[path] ??= {};
    paths[path][route.method] = operation;
  }
  return {
    openapi: '3.1.0',
    info: { title: info.title, version: info.version },
    // First the server the document was read from (a relative URL): /docs' "Try it out" then calls the
    // origin the page came from, which its Content-Security-Policy allows, whatever name reached it.
    servers: [
      { url: '/', description: 'This server (where this document was read)' },
      ...(info.serverUrl ? [{ url: info.serverUrl, description: 'PUBLIC_URL' }] : []),
    ],
    paths,
    components: {
      schemas: { Error: errorBody },
      securitySchemes: {
        bearerAuth: { type: 'http', scheme: 'bearer', description: 'JWT access token, or a CDN API token (cdn_...)' },
      },
    },
  };
}
