import t from 'tap';
import { z } from 'zod';
import { buildOpenApi } from './openapi.ts';
import { data, type RouteDefinition } from './route.ts';
import { withExample } from './schemas.ts';

const body = z.strictObject({ name: z.string().trim().min(1).max(20), size: z.number().int().default(1) }).superRefine(() => {});
const route = (withBody: z.ZodType): RouteDefinition => ({
  method: 'post', path: '/v1/things', summary: 'Create a thing', tags: ['Things'], access: 'public',
  body: withBody, responses: { 201: data(z.object({ id: z.string() })) }, handler: async () => ({ id: 'x' }),
});
const mediaType = (doc: any) => doc.paths['/v1/things'].post.requestBody.content['application/json'];

t.test('a declared example becomes the media type\'s example ("Try it out" prefills it), even on a transforming schema', async (t) => {
  const declared = withExample(body, { name: 'Big box', size: 3 });
  t.ok(declared.safeParse({ name: 'Big box', size: 3 }).success);
  const json = mediaType(buildOpenApi([route(declared)], { title: 'T', version: '1' }));
  t.same(json.example, { name: 'Big box', size: 3 });
  t.equal(json.schema.example, undefined, 'stated once, where OpenAPI puts a request example');
  t.equal(json.schema.properties.name.maxLength, 20, 'the schema is unchanged');
});

t.test('without a declared example the media type has none (Swagger UI then samples the schema)', async (t) => {
  const json = mediaType(buildOpenApi([route(body)], { title: 'T', version: '1' }));
  t.notOk('example' in json);
});

t.test('servers: this server first (a relative URL), PUBLIC_URL after it', async (t) => {
  const doc = buildOpenApi([route(body)], { title: 'T', version: '1', serverUrl: 'https://api.example.com' }) as any;
  t.same(doc.servers.map((s: { url: string }) => s.url), ['/', 'https://api.example.com']);
  t.same((buildOpenApi([], { title: 'T', version: '1' }) as any).servers.map((s: { url: string }) => s.url), ['/']);
});
