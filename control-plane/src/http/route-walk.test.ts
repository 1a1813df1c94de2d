// Walks every operation in /openapi.json with malformed values in each of its
// inputs — NUL and control characters in every string (path, query, body,
// field names), values of the wrong type, tampered cursors, dates outside
// what PostgreSQL stores, malformed bodies, bodies nested 100,000 levels
// deep — as a superadmin (so requests get past authorization) and
// anonymously. No answer may be a 5xx, and each malformed request gets a
// 4xx. New routes join the walk by being declared.
import http from 'node:http';
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { bearer, createSuperadmin, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { operationsOf, sample, setPath, stringPaths, type OpenApiDocument, type Operation } from '../../../test/support/openapi-samples.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const admin = await createSuperadmin(cp);
const doc = (await cp.request('GET', '/openapi.json')).body as OpenApiDocument;

const NUL = 'a\u0000b';
const cursorOf = (data: unknown) => Buffer.from(JSON.stringify(data)).toString('base64url');
const TAMPERED_CURSORS = [
  cursorOf({ s: '-created_at', v: 12, id: 'x', d: 'n' }),
  cursorOf({ s: '-created_at', v: '2026-01-01T00:00:00.000Z', t: 'd', id: 7, d: 'p' }),
  cursorOf({ s: 'created_at', v: '0000-01-01T00:00:00.000Z', t: 'd', id: crypto.randomUUID(), d: 'n' }),
  cursorOf({ s: 'email', v: 5, id: crypto.randomUUID(), d: 'n' }),
  cursorOf({ s: 'name', v: { $ne: null }, id: crypto.randomUUID(), d: 'n' }),
  cursorOf('just a string'),
  '%%%',
];
const DEEP_ARRAYS = '['.repeat(100_000) + ']'.repeat(100_000);
const DEEP_OBJECTS = '{"a":'.repeat(100_000) + '1' + '}'.repeat(100_000);
const BAD_DATES = ['0000-01-01T00:00:00Z', '-000001-01-01T00:00:00Z', '+275760-09-13T00:00:00Z', '2026-13-45T25:61:61Z'];

interface Probe { what: string; path: string; query: string; body?: string; contentType?: string }

function probes(template: string, op: Operation): Probe[] {
  const params = op.parameters ?? [];
  const pathParams = params.filter((p) => p.in === 'path');
  const queryParams = params.filter((p) => p.in === 'query');
  const fill = (overrides: Record<string, string> = {}) =>
    template.replace(/\{([^}]+)\}/g, (_, name: string) => overrides[name] ?? encodeURIComponent(String(sample(pathParams.find((p) => p.name === name)?.schema))));
  const bodySchema = op.requestBody?.content['application/json']?.schema;
  const body = bodySchema ? JSON.stringify(sample(bodySchema)) : undefined;
  const out: Probe[] = [];
  const add = (what: string, path: string, query: string, withBody: string | undefined = body, contentType?: string) => out.push({ what, path, query, body: withBody, contentType });

  for (const p of pathParams) {
    for (const value of ['a%00b', '%1b%5b31m', 'x'.repeat(300), '%ed%a0%80', '..%2f..%2fetc']) add(`path ${p.name}=${value.slice(0, 12)}`, fill({ [p.name]: value }), '');
  }
  add('unknown query field with NUL', fill(), `zz=${encodeURIComponent(NUL)}`);
  for (const p of queryParams) {
    const q = (v: string) => `${p.name}=${encodeURIComponent(v)}`;
    add(`query ${p.name} with NUL`, fill(), q(NUL));
    add(`query ${p.name} twice`, fill(), `${q('a')}&${q('b')}`);
    const free = p.schema.type === 'string' && !p.schema.enum && !p.schema.pattern && !p.schema.format;
    if (!free) add(`query ${p.name} of the wrong type`, fill(), q('{"$gt":""}'));
    if (p.name === 'cursor') for (const c of TAMPERED_CURSORS) add('tampered cursor', fill(), q(c));
    if (p.name === 'limit') for (const v of ['0', '-1', '1e309', '101', 'NaN']) add(`limit=${v}`, fill(), q(v));
    const fmt = p.schema.format ?? p.schema.anyOf?.find((s) => s.format)?.format;
    if (fmt === 'date-time' || /_(after|before|from|to|since|until)$/.test(p.name)) for (const d of BAD_DATES) add(`query ${p.name}=${d}`, fill(), q(d));
  }
  if (bodySchema) {
    for (const path of stringPaths(bodySchema)) {
      if (!path.length) continue;
      add(`body ${path.join('.')} with NUL`, fill(), '', JSON.stringify(setPath(JSON.parse(body!), path, NUL)));
      add(`body ${path.join('.')} as an object`, fill(), '', JSON.stringify(setPath(JSON.parse(body!), path, { $gt: '' })));
    }
    add('body with a NUL field name', fill(), '', JSON.stringify({ ...JSON.parse(body!), ['k\u0000']: 1 }));
    for (const raw of ['[]', '"text"', 'null', '1', '{"a":', '{"__proto__":{"x":1}}', JSON.stringify(JSON.parse('{"a":'.repeat(200) + '1' + '}'.repeat(200)))]) {
      add(`body ${raw.slice(0, 16)}`, fill(), '', raw);
    }
    // Regression: 20,000 levels overflowed the stack of the unsafe-string scan (500, before authentication).
    add('body nested 100,000 arrays deep', fill(), '', DEEP_ARRAYS);
    add('body nested 100,000 objects deep', fill(), '', DEEP_OBJECTS);
    add('body of another media type', fill(), '', 'a=b', 'application/x-www-form-urlencoded');
  } else {
    add('a body where none is taken', fill(), '', JSON.stringify({ unexpected: NUL }));
  }
  return out;
}

/** node:http rather than fetch: a GET may carry a body here, and the target is sent as written. */
function send(method: string, target: string, headers: Record<string, string>, body?: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${cp.url}${target}`, { method, headers: body === undefined ? headers : { ...headers, 'content-length': String(Buffer.byteLength(body)) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const operations = operationsOf(doc);
t.ok(operations.length >= 25, `${operations.length} operations in the document`);

for (const { method, path, op } of operations) {
  t.test(`${method} ${path}: malformed input never gives a 5xx`, async (t) => {
    const list = probes(path, op);
    let refused = 0;
    for (const probe of list) {
      for (const identity of ['superadmin', 'anonymous'] as const) {
        const headers: Record<string, string> = identity === 'superadmin' ? bearer(admin.accessToken) : {};
        if (probe.body !== undefined) headers['content-type'] = probe.contentType ?? 'application/json';
        const res = await send(method, `${probe.path}${probe.query ? `?${probe.query}` : ''}`, headers, probe.body);
        const text = res.text;
        if (res.status >= 500) t.fail(`${identity} ${probe.what}: ${res.status} ${text.slice(0, 300)}`);
        else if (res.status < 400 && identity === 'superadmin') t.fail(`${identity} ${probe.what}: accepted with ${res.status}`);
        else refused++;
      }
    }
    t.equal(refused, list.length * 2, `${list.length} malformed requests, each refused with a 4xx`);
  });
}

t.test('safe reads with well-formed values never give a 5xx', async (t) => {
  for (const { path, op } of operations.filter((o) => o.method === 'GET')) {
    const params = op.parameters ?? [];
    const url = path.replace(/\{([^}]+)\}/g, (_, name: string) => encodeURIComponent(String(sample(params.find((p) => p.name === name)?.schema))));
    const res = await cp.request('GET', url, { headers: bearer(admin.accessToken) });
    t.ok(res.status < 500, `GET ${url}: ${res.status}`);
  }
});
