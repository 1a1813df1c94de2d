import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { createWidgetTable, Widget, widgetRoutes } from '../../../test/support/widgets-fixture.ts';

const cp = await startTestControlPlane(t, { extraEntities: [Widget], extraRoutes: widgetRoutes });
await createWidgetTable(cp.database.db);

const created = await cp.request('POST', '/v1/test/widgets', { json: { name: 'etag', size: 2 } });
const id = created.body.data.id;
const row = async () => {
  const [r] = await cp.database.db.orm.em.fork().getConnection().execute('select name, size, version from test_widget where id = ?', [id]);
  return r;
};

t.test('GET returns a strong ETag that changes with the record', async (t) => {
  const a = await cp.request('GET', `/v1/test/widgets/${id}`);
  const etag = a.headers.get('etag')!;
  t.match(etag, /^"[^"]+"$/, 'strong ETag');
  const b = await cp.request('GET', `/v1/test/widgets/${id}`);
  t.equal(b.headers.get('etag'), etag, 'stable while unchanged');
  const patched = await cp.request('PATCH', `/v1/test/widgets/${id}`, { json: { size: 3 }, headers: { 'if-match': etag } });
  t.equal(patched.status, 200);
  t.not(patched.headers.get('etag'), etag, 'new version, new ETag');
});

t.test('a stale If-Match gives 412 and leaves the row unchanged', async (t) => {
  const current = await cp.request('GET', `/v1/test/widgets/${id}`);
  const staleEtag = current.headers.get('etag')!;
  await cp.request('PATCH', `/v1/test/widgets/${id}`, { json: { size: 4 }, headers: { 'if-match': staleEtag } });
  const before = await row();
  const res = await cp.request('PATCH', `/v1/test/widgets/${id}`, { json: { name: 'overwritten', size: 9 }, headers: { 'if-match': staleEtag } });
  t.equal(res.status, 412);
  t.equal(res.body.code, 'PRECONDITION_FAILED');
  t.same(await row(), before, 'row unchanged');
});

t.test('weak and unknown validators do not match; * does', async (t) => {
  const current = await cp.request('GET', `/v1/test/widgets/${id}`);
  const etag = current.headers.get('etag')!;
  const before = await row();
  t.equal((await cp.request('PATCH', `/v1/test/widgets/${id}`, { json: { size: 5 }, headers: { 'if-match': `W/${etag}` } })).status, 412);
  t.equal((await cp.request('PATCH', `/v1/test/widgets/${id}`, { json: { size: 5 }, headers: { 'if-match': '"nope"' } })).status, 412);
  t.same(await row(), before);
  t.equal((await cp.request('PATCH', `/v1/test/widgets/${id}`, { json: { size: 5 }, headers: { 'if-match': `"nope", ${etag}` } })).status, 200, 'a list containing the current ETag matches');
  t.equal((await cp.request('PATCH', `/v1/test/widgets/${id}`, { json: { size: 6 }, headers: { 'if-match': '*' } })).status, 200);
});

t.test('two writers with the same If-Match: one wins, the other gets 412', async (t) => {
  const etag = (await cp.request('GET', `/v1/test/widgets/${id}`)).headers.get('etag')!;
  const results = await Promise.all([
    cp.request('PATCH', `/v1/test/widgets/${id}`, { json: { size: 7 }, headers: { 'if-match': etag } }),
    cp.request('PATCH', `/v1/test/widgets/${id}`, { json: { size: 8 }, headers: { 'if-match': etag } }),
  ]);
  const statuses = results.map((r) => r.status).sort();
  t.same(statuses, [200, 412], 'optimistic lock catches the race the header check cannot');
});

t.test('404 for a missing record, 400 for a malformed id', async (t) => {
  const missing = await cp.request('GET', `/v1/test/widgets/${crypto.randomUUID()}`);
  t.equal(missing.status, 404);
  t.equal(missing.body.code, 'NOT_FOUND');
  const malformed = await cp.request('GET', '/v1/test/widgets/123');
  t.equal(malformed.status, 400);
  t.equal(malformed.body.errors[0].field, 'id');
});
