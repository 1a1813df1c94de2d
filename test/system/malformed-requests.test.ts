// 10,000 malformed requests across every operation of the OpenAPI document
// (issue 26 item 5), against a control-plane process: seeded (MALFORMED_SEED
// runs one again; MALFORMED_REQUESTS changes the count), each request one
// malformed input — a value of a type its schema does not allow, a string
// past its maxLength, NUL and control characters, broken JSON, nesting
// thousands of levels deep, a tampered cursor, a bad id, a body of another
// media type, a body where none is taken — sent as the superadmin (most, so
// validation is reached), anonymously or with a forged or malformed
// credential. No answer may be a 5xx or missing, each is a 4xx, the process
// stays up and nothing is stored: every table's row count is the same after
// (audit_log, which records refusals, is compared as well: nothing malformed
// is audited). Complements control-plane/src/http/route-walk.test.ts, which
// walks fixed probes in process.
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import pg from 'pg';
import t from 'tap';
import { startDeployment, type Deployment } from '../support/edge-deployment.ts';
import {
  operationsOf, sample, setPath, type JsonSchema, type OpenApiDocument, type Operation,
} from '../support/openapi-samples.ts';
import { seededRandom, type SeededRandom } from '../support/seeded-random.ts';
import { detectServices } from '../support/services.ts';

const services = await detectServices();
const SEED = Number(process.env.MALFORMED_SEED ?? 26);
const TOTAL = Number(process.env.MALFORMED_REQUESTS ?? 10_000);

type Random = SeededRandom;

interface Malformed { kind: string; path: string; query: string; body?: string | Buffer; contentType?: string }

/** The JSON types a schema admits (empty: anything). */
function admitted(schema: JsonSchema | undefined): Set<string> {
  const out = new Set<string>();
  if (!schema) return out;
  for (const type of Array.isArray(schema.type) ? schema.type : schema.type ? [schema.type] : []) out.add(type === 'integer' ? 'number' : type);
  for (const option of schema.anyOf ?? []) for (const type of admitted(option)) out.add(type);
  if (schema.const !== undefined || schema.enum) out.add(typeof (schema.const ?? schema.enum?.[0]));
  return out;
}

/** Percent-encodes every byte of the text's UTF-8 (lone surrogates included, as U+FFFD). */
const enc = (s: string) => [...Buffer.from(s, 'utf8')].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('');

const jsonType = (v: unknown) => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);
const WRONG_VALUES: unknown[] = [12345, -1.5, true, false, null, [], [1, 'a'], {}, { $gt: '' }, 'text', '', '1e309'];

/** Places in a body schema (paths of members, to 3 levels) with the schema of each. */
function members(schema: JsonSchema | undefined, path: string[] = [], out: { path: string[]; schema: JsonSchema }[] = [], depth = 0) {
  if (!schema || depth > 3) return out;
  const object = schema.anyOf?.find((s) => s.properties) ?? schema;
  for (const [key, member] of Object.entries(object.properties ?? {})) {
    out.push({ path: [...path, key], schema: member });
    members(member, [...path, key], out, depth + 1);
  }
  return out;
}

const NULS = ['a\u0000b', '\u0000', 'x\u0000\u001b[31mred\u0007', '\u0000\ud800', 'ok\u0000'.repeat(50)];
const BAD_IDS = ['a%00b', '%ed%a0%80', '..%2f..%2fetc%2fpasswd', `${'9'.repeat(400)}`, '%27%20or%201%3D1--%00', '%1b%5b31m%00', `${crypto.randomUUID()}%00`];
const BAD_JSON = ['{"a":', '{"a":1,}', "{'a':1}", 'NaN', '{"a":1}{"b":2}', '[1,2', '{"a":"\\x41"}', '{"a":1e999999', '\u0000{}', 'tru', '{"__proto__":'];
const WRONG_MEDIA = [
  ['text/plain', 'name=x'], ['application/xml', '<a><b>1</b></a>'], ['application/x-www-form-urlencoded', 'a=b&c=%00'],
  ['multipart/form-data; boundary=zz', '--zz\r\nContent-Disposition: form-data; name="a"\r\n\r\n\u0000\r\n--zz--'], ['application/json; charset=utf-16', '\u0000{\u0000}'],
] as const;

function malformed(r: Random, template: string, op: Operation): Malformed {
  const params = op.parameters ?? [];
  const pathParams = params.filter((p) => p.in === 'path');
  const queryParams = params.filter((p) => p.in === 'query');
  const fill = (override?: [string, string]) =>
    template.replace(/\{([^}]+)\}/g, (_, name: string) => (override?.[0] === name ? override[1] : encodeURIComponent(String(sample(pathParams.find((p) => p.name === name)?.schema)))));
  const bodySchema = op.requestBody?.content['application/json']?.schema;
  const multipart = op.requestBody && !bodySchema;
  const base = bodySchema ? sample(bodySchema) : undefined;
  const json = (v: unknown) => JSON.stringify(v);
  const kinds: string[] = ['body where none is taken', 'unknown query field with NUL', 'media type'];
  if (pathParams.length) kinds.push('bad id', 'bad id');
  if (queryParams.length) kinds.push('query value with NUL', 'query value of the wrong type');
  if (queryParams.some((p) => p.name === 'cursor')) kinds.push('tampered cursor');
  if (bodySchema) kinds.push('wrong type', 'wrong type', 'wrong type', 'over maxLength', 'NUL in a string', 'NUL in a string', 'broken JSON', 'deep nesting', 'body of the wrong shape', 'NUL in a field name');
  let kind = r.pick(kinds);
  if (kind === 'body where none is taken' && (bodySchema || multipart)) kind = 'broken JSON';
  switch (kind) {
    case 'bad id': {
      const p = r.pick(pathParams);
      return { kind, path: fill([p.name, r.pick(BAD_IDS)]), query: '', body: base === undefined ? undefined : json(base) };
    }
    case 'query value with NUL': {
      const p = r.pick(queryParams);
      return { kind, path: fill(), query: `${p.name}=${enc(r.pick(NULS))}` };
    }
    case 'query value of the wrong type': {
      const p = r.pick(queryParams);
      const free = admitted(p.schema).has('string') && !p.schema.enum && !p.schema.pattern && !p.schema.format && !p.schema.anyOf;
      // A free-text parameter takes any text: a NUL is what it refuses.
      const value = free ? `${r.text(3)}\u0000` : r.pick(['{"$gt":""}', '-1', '1e309', 'NaN', '[]', 'null', '0x10', '2026-13-45T25:61:61Z', r.text(600)]);
      return { kind, path: fill(), query: `${p.name}=${enc(value)}&${p.name}=${enc(value)}` };
    }
    case 'tampered cursor': {
      const raw = r.pick([
        () => randomBytes(r.int(1, 300)).toString('base64url'),
        () => Buffer.from(json({ s: r.text(5), v: r.pick(WRONG_VALUES), id: r.pick([7, r.text(8), null]), d: r.pick(['n', 'p', 'x']) })).toString('base64url'),
        () => `${r.text(10)}%%%`,
        () => Buffer.from('\u0000'.repeat(r.int(1, 40))).toString('base64url'),
      ])();
      return { kind, path: fill(), query: `cursor=${enc(raw)}` };
    }
    case 'unknown query field with NUL':
      return { kind, path: fill(), query: `zz${r.text(3)}=${enc(r.pick(NULS))}`, body: base === undefined ? undefined : json(base) };
    case 'body where none is taken':
      return { kind, path: fill(), query: '', body: json({ unexpected: r.pick(NULS), [r.text(4)]: r.pick(WRONG_VALUES) }) };
    case 'media type': {
      const [contentType, body] = r.pick(WRONG_MEDIA);
      return { kind, path: fill(), query: '', body, contentType: multipart && contentType.startsWith('multipart') ? 'text/plain' : contentType };
    }
    case 'wrong type': {
      const places = members(bodySchema);
      const place = places.length ? r.pick(places) : undefined;
      const allowed = admitted(place?.schema);
      const candidates = WRONG_VALUES.filter((v) => allowed.size > 0 && !allowed.has(jsonType(v)));
      if (!place || !candidates.length) return { kind: 'body of the wrong shape', path: fill(), query: '', body: r.pick(['[]', '"text"', '1', 'null', 'true']) };
      return { kind, path: fill(), query: '', body: json(setPath(base, place.path, r.pick(candidates))) };
    }
    case 'over maxLength': {
      const places = members(bodySchema).filter((m) => m.schema.maxLength !== undefined);
      if (!places.length) return { kind: 'body over the size limit', path: fill(), query: '', body: json({ a: 'x'.repeat(1024 * 1024 + r.int(1, 4096)) }) };
      const place = r.pick(places);
      return { kind, path: fill(), query: '', body: json(setPath(base, place.path, 'x'.repeat(place.schema.maxLength! + r.int(1, r.chance(0.1) ? 200_000 : 100)))) };
    }
    case 'NUL in a string': {
      const places = members(bodySchema).filter((m) => admitted(m.schema).has('string'));
      const where = places.length ? r.pick(places).path : [r.text(4)];
      return { kind, path: fill(), query: '', body: json(setPath(base, where, r.pick(NULS))) };
    }
    case 'NUL in a field name':
      return { kind, path: fill(), query: '', body: json({ ...(base as object), [`${r.text(3)}\u0000`]: 1 }) };
    case 'broken JSON': {
      const whole = json(base ?? { a: 1 });
      const body = r.chance(0.5) ? whole.slice(0, r.int(1, Math.max(1, whole.length - 1))) : r.pick(BAD_JSON);
      return { kind, path: fill(), query: '', body: Buffer.concat([Buffer.from(body), r.chance(0.2) ? Buffer.from([0xff, 0xfe]) : Buffer.alloc(0)]) };
    }
    case 'deep nesting': {
      const depth = r.int(65, r.chance(0.1) ? 100_000 : 5_000);
      const body = r.chance(0.5) ? '['.repeat(depth) + ']'.repeat(depth) : '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);
      return { kind, path: fill(), query: '', body };
    }
    default:
      return { kind: 'body of the wrong shape', path: fill(), query: '', body: r.pick(['[]', '"text"', '1', 'null', 'true', '[{}]']) };
  }
}

/** A credential that is malformed, forged or of the wrong scheme. */
function badCredential(r: Random): string {
  const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
  return r.pick([
    () => 'Bearer',
    () => `Bearer ${r.text(r.int(1, 60))}`,
    () => `Bearer ${b64({ alg: 'none', typ: 'JWT' })}.${b64({ sub: crypto.randomUUID(), role: 'superadmin', exp: 4_102_444_800 })}.`,
    () => `Bearer ${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub: crypto.randomUUID(), exp: 4_102_444_800 })}.${randomBytes(32).toString('base64url')}`,
    () => `Bearer ${b64({ alg: 'EdDSA', kid: r.text(8) })}.${b64({ sub: crypto.randomUUID(), exp: 1 })}.${randomBytes(64).toString('base64url')}`,
    () => `Bearer cdn_${r.text(40)}`,
    () => `Basic ${Buffer.from(`admin:${r.text(8)}`).toString('base64')}`,
    () => `Bearer ${'x'.repeat(r.int(5000, 7000))}`,
  ])();
}

function send(base: string, method: string, target: string, headers: Record<string, string>, body?: string | Buffer): Promise<number> {
  return new Promise((resolve) => {
    const req = http.request(`${base}${target}`, {
      method, timeout: 30_000,
      headers: body === undefined ? headers : { ...headers, 'content-length': String(Buffer.byteLength(body)) },
    }, (res) => {
      res.resume().on('end', () => resolve(res.statusCode ?? 0)).on('error', () => resolve(0));
    });
    req.on('timeout', () => req.destroy(new Error('timeout'))).on('error', () => resolve(0));
    req.end(body);
  });
}

async function rowCounts(url: string): Promise<Record<string, number>> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000, query_timeout: 60_000 });
  await client.connect();
  try {
    const tables = (await client.query<{ name: string }>(`select quote_ident(schemaname) || '.' || quote_ident(tablename) as name from pg_tables where schemaname not in ('pg_catalog', 'information_schema') order by 1`)).rows;
    const counts: Record<string, number> = {};
    for (const { name } of tables) counts[name] = Number((await client.query<{ n: string }>(`select count(*) as n from ${name}`)).rows[0]!.n);
    return counts;
  } finally {
    await client.end();
  }
}

async function run(t: import('tap').Test, deployment: Deployment) {
  const base = deployment.process.url;
  const doc = await (await fetch(`${base}/openapi.json`)).json() as OpenApiDocument;
  const operations = operationsOf(doc);
  t.ok(operations.length >= 100, `${operations.length} operations in the document`);
  const before = await rowCounts(deployment.database.url);
  const r = seededRandom(SEED);
  t.comment(`seed ${SEED} (MALFORMED_SEED=${SEED} runs it again), ${TOTAL} requests over ${operations.length} operations`);

  const byKind: Record<string, number> = {};
  const byStatus: Record<number, number> = {};
  const failures: string[] = [];
  const requests = Array.from({ length: TOTAL }, (_, i) => {
    const { method, path, op } = operations[i % operations.length]!;
    const m = malformed(r, path, op);
    const who = r.chance(0.75) ? 'superadmin' : r.chance(0.4) ? 'anonymous' : 'forged';
    const headers: Record<string, string> = {};
    if (who === 'superadmin') headers.authorization = `Bearer ${deployment.accessToken}`;
    if (who === 'forged') headers.authorization = badCredential(r);
    if (m.body !== undefined) headers['content-type'] = m.contentType ?? 'application/json';
    return { method, target: `${m.path}${m.query ? `?${m.query}` : ''}`, headers, body: m.body, what: `${who} ${method} ${path} ${m.kind}` };
  });
  const started = Date.now();
  let next = 0;
  await Promise.all(Array.from({ length: 4 }, async () => {
    while (next < requests.length) {
      const req = requests[next++]!;
      const status = await send(base, req.method, req.target, req.headers, req.body);
      byStatus[status] = (byStatus[status] ?? 0) + 1;
      const kind = req.what.split(' ').slice(3).join(' ');
      byKind[kind] = (byKind[kind] ?? 0) + 1;
      if (status >= 500 || status === 0) failures.push(`${status || 'no answer'}: ${req.what} ${req.target.slice(0, 200)}`);
      else if (status < 400) failures.push(`accepted with ${status}: ${req.what} ${req.target.slice(0, 200)}`);
    }
  }));
  const seconds = (Date.now() - started) / 1000;
  t.comment(`${TOTAL} requests in ${seconds.toFixed(1)} s; statuses ${JSON.stringify(byStatus)}`);
  t.comment(`kinds ${JSON.stringify(byKind)}`);
  t.same(failures.slice(0, 20), [], `no 5xx, no missing answer, every malformed request refused with a 4xx (${failures.length} otherwise)`);
  t.equal(deployment.process.child.exitCode, null, 'the control plane is still running');
  t.equal((await fetch(`${base}/healthz`)).status, 200, 'and healthy');
  t.equal((await deployment.api('GET', '/v1/users/me')).status, 200, 'the superadmin\'s session survived');
  const after = await rowCounts(deployment.database.url);
  const changed = Object.keys(after).filter((table) => after[table] !== before[table]).map((table) => `${table}: ${before[table]} → ${after[table]}`);
  t.same(changed, [], `nothing stored: the row count of each of the ${Object.keys(after).length} tables is unchanged`);
}

if (!services.postgresUrl) {
  t.pass('skipped: needs PostgreSQL');
} else {
  const { postgresUrl, redisUrl } = services;
  await t.test(`${TOTAL} malformed requests across every operation: no 5xx, no crash, nothing stored`, { timeout: 240_000 }, async (t) => {
    // No background jobs: the only writes would be the requests'.
    const deployment = await startDeployment(t, { postgresUrl, env: { JOBS_WORKER: 'false', ...(redisUrl ? { REDIS_URL: redisUrl } : {}) } });
    await run(t, deployment);
  });
}
