// The route declaration is a contract the router enforces: outside production
// a reply with an undeclared status, a body off its record, or an undeclared
// error code becomes a 500 that names the route and the difference (so the
// suite fails on it); versioned records get their ETag from the router, which
// also answers If-None-Match and checks If-Match before the handler runs.
import t from 'tap';
import { z } from 'zod';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { createWidgetTable, Widget, widgetRoutes } from '../../../test/support/widgets-fixture.ts';
import { ApiError } from './errors.ts';
import { data, empty, reply, routesFor } from './route.ts';
import { timestamp } from './schemas.ts';

const defineRoute = routesFor();
const record = z.object({ id: z.string(), at: timestamp() });

const broken = [
  defineRoute({
    method: 'get', path: '/v1/test/contract/undeclared-status', summary: 'Answers 202, declares 200', tags: ['test'], access: 'public',
    responses: { 200: data(record) },
    async handler() {
      return reply.with(202, { id: 'a', at: new Date() });
    },
  }),
  defineRoute({
    method: 'get', path: '/v1/test/contract/off-schema', summary: 'Answers a body its record refuses', tags: ['test'], access: 'public',
    responses: { 200: data(record) },
    async handler() {
      return { id: 'a', at: 'not a date' } as never;
    },
  }),
  defineRoute({
    method: 'get', path: '/v1/test/contract/undeclared-error', summary: 'Answers 409 without declaring it', tags: ['test'], access: 'public',
    responses: { 200: data(record) },
    async handler() {
      throw new ApiError('CONFLICT', 'nope');
    },
  }),
  defineRoute({
    method: 'get', path: '/v1/test/contract/declared-error', summary: 'Answers 409 and declares it', tags: ['test'], access: 'public',
    responses: { 200: data(record) }, errors: ['CONFLICT'],
    async handler() {
      throw new ApiError('CONFLICT', 'declared');
    },
  }),
  defineRoute({
    method: 'delete', path: '/v1/test/contract/empty', summary: 'Answers 204', tags: ['test'], access: 'public',
    responses: { 204: empty },
    async handler() {
      return reply.noContent();
    },
  }),
  defineRoute({
    method: 'get', path: '/v1/test/contract/presented', summary: 'Hands over an entity-like object', tags: ['test'], access: 'public',
    responses: { 200: data(record) },
    async handler() {
      // Extra fields (secrets, internals) are dropped by the record; dates leave as ISO strings.
      return { id: 'b', at: new Date('2026-01-02T03:04:05.000Z'), password_hash: 'secret' } as never;
    },
  }),
];

const cp = await startTestControlPlane(t, { extraEntities: [Widget], extraRoutes: [...widgetRoutes, ...broken] });
await createWidgetTable(cp.database.db);
const runs = async () => Number((await cp.database.db.orm.em.fork().getConnection().execute('select count(*)::int as n from test_widget_runs'))[0].n);

t.test('an undeclared status fails loudly, naming the route and the status', async (t) => {
  const res = await cp.request('GET', '/v1/test/contract/undeclared-status');
  t.equal(res.status, 500);
  t.equal(res.body.code, 'INTERNAL_ERROR');
  t.match(res.body.message, /GET \/v1\/test\/contract\/undeclared-status: answered 202, which it does not declare/);
});

t.test('a body off its schema fails loudly, naming the field', async (t) => {
  const res = await cp.request('GET', '/v1/test/contract/off-schema');
  t.equal(res.status, 500);
  t.match(res.body.message, /off-schema: the 200 body does not match its declared schema: at:/);
});

t.test('an undeclared error code fails loudly; a declared one passes', async (t) => {
  const res = await cp.request('GET', '/v1/test/contract/undeclared-error');
  t.equal(res.status, 500);
  t.match(res.body.message, /answered error CONFLICT, which it does not declare/);
  const ok = await cp.request('GET', '/v1/test/contract/declared-error');
  t.equal(ok.status, 409);
  t.same(Object.keys(ok.body).sort(), ['code', 'message', 'request_id']);
});

t.test('errors every route may answer need no declaration (404 of an unknown record, 400 of bad input)', async (t) => {
  t.equal((await cp.request('GET', `/v1/test/widgets/${crypto.randomUUID()}`)).status, 404);
  t.equal((await cp.request('GET', '/v1/test/widgets/not-a-uuid')).status, 400);
});

t.test('the record presents the value: extra fields dropped, dates as ISO strings', async (t) => {
  const res = await cp.request('GET', '/v1/test/contract/presented');
  t.equal(res.status, 200);
  t.same(res.body, { data: { id: 'b', at: '2026-01-02T03:04:05.000Z' } });
  const gone = await cp.request('DELETE', '/v1/test/contract/empty');
  t.equal(gone.status, 204);
  t.equal(gone.text, '');
});

t.test('versioned records: the router sets the ETag and answers If-None-Match with 304', async (t) => {
  const created = await cp.request('POST', '/v1/test/widgets', { json: { name: 'contract' } });
  t.equal(created.status, 201);
  t.match(created.headers.get('etag'), /^"[^"]+"$/, 'the create reply carries the ETag too');
  const read = await cp.request('GET', `/v1/test/widgets/${created.body.data.id}`);
  const etag = read.headers.get('etag')!;
  t.equal(etag, created.headers.get('etag'));
  const again = await cp.request('GET', `/v1/test/widgets/${created.body.data.id}`, { headers: { 'if-none-match': etag } });
  t.equal(again.status, 304);
  t.equal(again.headers.get('etag'), etag);
  t.equal(again.text, '');
  const other = await cp.request('GET', `/v1/test/widgets/${created.body.data.id}`, { headers: { 'if-none-match': '"something-else"' } });
  t.equal(other.status, 200);
});

t.test('a stale If-Match is refused before the handler runs', async (t) => {
  const created = await cp.request('POST', '/v1/test/widgets', { json: { name: 'ifmatch' } });
  const id = created.body.data.id;
  const etag = created.headers.get('etag')!;
  t.equal((await cp.request('PATCH', `/v1/test/widgets/${id}`, { json: { size: 2 }, headers: { 'if-match': etag } })).status, 200);
  const before = await runs();
  const stale = await cp.request('PATCH', `/v1/test/widgets/${id}`, { json: { size: 3 }, headers: { 'if-match': etag } });
  t.equal(stale.status, 412);
  t.equal(stale.body.code, 'PRECONDITION_FAILED');
  t.equal(await runs(), before);
  t.equal((await cp.request('GET', `/v1/test/widgets/${id}`)).body.data.size, 2, 'unchanged');
});

t.test('regression: a write without If-Match that loses an optimistic-lock race runs again on the fresh record; 409 only after 3 lost runs', async (t) => {
  const make = async () => (await cp.request('POST', '/v1/test/widgets', { json: { name: 'contended', size: 1 } })).body.data.id as string;
  const read = async (id: string) => (await cp.request('GET', `/v1/test/widgets/${id}`)).body.data;

  const twice = await make();
  const won = await cp.request('PATCH', `/v1/test/widgets/${twice}/contended`, { json: { name: 'third-run', interfere_below: 3 } });
  t.equal(won.status, 200, 'two runs lost the race, the third one stored the change');
  t.match(won.body.data, { name: 'third-run', size: 3 }, 'applied to the record as the other writer left it');
  t.equal(won.headers.get('etag'), (await cp.request('GET', `/v1/test/widgets/${twice}`)).headers.get('etag'), 'the ETag of what is stored');

  const always = await make();
  const lost = await cp.request('PATCH', `/v1/test/widgets/${always}/contended`, { json: { name: 'never', interfere_below: 4 } });
  t.equal(lost.status, 409, 'three lost runs: the client is told to retry');
  t.equal(lost.body.code, 'CONFLICT');
  t.match(await read(always), { name: 'contended', size: 4 }, 'none of the runs changed the name: only the other writer did');

  const precondition = await make();
  const etag = (await cp.request('GET', `/v1/test/widgets/${precondition}`)).headers.get('etag')!;
  const refused = await cp.request('PATCH', `/v1/test/widgets/${precondition}/contended`, { json: { name: 'if-match', interfere_below: 2 }, headers: { 'if-match': etag } });
  t.equal(refused.status, 412, 'with If-Match the record changing is a failed precondition: not run again');
  t.match(await read(precondition), { name: 'contended', size: 2 });
});

t.test('the OpenAPI document shows the envelopes, the typed paging meta and the implied errors', async (t) => {
  const doc = (await cp.request('GET', '/openapi.json')).body;
  const list = doc.paths['/v1/test/widgets'].get.responses['200'].content['application/json'].schema;
  t.same(Object.keys(list.properties).sort(), ['data', 'meta']);
  t.same(list.properties.meta.required.sort(), ['count', 'has_more', 'limit', 'next_cursor', 'prev_cursor', 'total']);
  const read = doc.paths['/v1/test/widgets/{id}'].get;
  t.equal(read.responses['200'].content['application/json'].schema.properties.data.properties.created_at.format, 'date-time');
  t.ok(read.responses['200'].headers.ETag, 'ETag documented');
  t.ok(read.responses['304'], '304 documented');
  t.ok(doc.paths['/v1/test/contract/declared-error'].get.responses['409']);
  t.notOk(doc.paths['/v1/test/contract/undeclared-error'].get.responses['409']);
});
