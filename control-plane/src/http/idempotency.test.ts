import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { createWidgetTable, Widget, widgetRoutes } from '../../../test/support/widgets-fixture.ts';

const cp = await startTestControlPlane(t, { extraEntities: [Widget], extraRoutes: widgetRoutes });
await createWidgetTable(cp.database.db);
const conn = () => cp.database.db.orm.em.fork().getConnection();
const counts = async () => {
  const [w] = await conn().execute('select count(*)::int as n from test_widget');
  const [r] = await conn().execute('select count(*)::int as n from test_widget_runs');
  return { widgets: w.n as number, runs: r.n as number };
};

t.test('POST with Idempotency-Key replays the original status and body', async (t) => {
  const before = await counts();
  const key = crypto.randomUUID();
  const first = await cp.request('POST', '/v1/test/widgets', { json: { name: 'alpha' }, headers: { 'idempotency-key': key } });
  t.equal(first.status, 201);
  const again = await cp.request('POST', '/v1/test/widgets', { json: { name: 'alpha' }, headers: { 'idempotency-key': key } });
  t.equal(again.status, 201);
  t.same(again.body, first.body, 'same body');
  t.equal(again.headers.get('location'), first.headers.get('location'));
  t.equal(again.headers.get('idempotent-replayed'), 'true');
  t.not(again.headers.get('x-request-id'), first.headers.get('x-request-id'), 'each request keeps its own request id');
  const after = await counts();
  t.equal(after.widgets - before.widgets, 1, 'one widget');
  t.equal(after.runs - before.runs, 1, 'the action ran once');
});

t.test('the same key with another body is refused with 422 and changes nothing', async (t) => {
  const key = crypto.randomUUID();
  await cp.request('POST', '/v1/test/widgets', { json: { name: 'beta' }, headers: { 'idempotency-key': key } });
  const before = await counts();
  const res = await cp.request('POST', '/v1/test/widgets', { json: { name: 'gamma' }, headers: { 'idempotency-key': key } });
  t.equal(res.status, 422);
  t.equal(res.body.code, 'IDEMPOTENCY_KEY_REUSED');
  t.same(await counts(), before);
});

t.test('10 concurrent duplicates perform the action once and all get its result', async (t) => {
  const before = await counts();
  const key = crypto.randomUUID();
  const results = await Promise.all(Array.from({ length: 10 }, () =>
    cp.request('POST', '/v1/test/widgets', { json: { name: 'concurrent', size: 3 }, headers: { 'idempotency-key': key } })));
  t.ok(results.every((r) => r.status === 201), results.map((r) => r.status).join(','));
  t.equal(new Set(results.map((r) => r.body.data.id)).size, 1, 'one id for all');
  const after = await counts();
  t.equal(after.widgets - before.widgets, 1);
  t.equal(after.runs - before.runs, 1);
});

t.test('keys are scoped: without a key every POST acts', async (t) => {
  const before = await counts();
  await cp.request('POST', '/v1/test/widgets', { json: { name: 'nokey' } });
  await cp.request('POST', '/v1/test/widgets', { json: { name: 'nokey' } });
  t.equal((await counts()).widgets - before.widgets, 2);
});

t.test('a failed validation is not recorded under the key', async (t) => {
  const key = crypto.randomUUID();
  const bad = await cp.request('POST', '/v1/test/widgets', { json: { name: 'BAD NAME' }, headers: { 'idempotency-key': key } });
  t.equal(bad.status, 400);
  const good = await cp.request('POST', '/v1/test/widgets', { json: { name: 'BAD NAME' }, headers: { 'idempotency-key': key } });
  t.equal(good.status, 400, 'still validated, not replayed');
  t.notOk(good.headers.get('idempotent-replayed'));
});

t.test('regression: a request refused before its handler runs gives its key back: the corrected request with the same key runs', async (t) => {
  // The key is claimed before validation (in the same write to Redis as the rate-limit command): a refused
  // request must release it, or its correction would be answered 422 (another body under the key).
  const before = await counts();
  const key = crypto.randomUUID();
  const bad = await cp.request('POST', '/v1/test/widgets', { json: { name: 'BAD NAME' }, headers: { 'idempotency-key': key } });
  t.equal(bad.status, 400);
  const good = await cp.request('POST', '/v1/test/widgets', { json: { name: 'corrected' }, headers: { 'idempotency-key': key } });
  t.equal(good.status, 201, 'the corrected request runs');
  t.notOk(good.headers.get('idempotent-replayed'));
  const again = await cp.request('POST', '/v1/test/widgets', { json: { name: 'corrected' }, headers: { 'idempotency-key': key } });
  t.equal(again.headers.get('idempotent-replayed'), 'true', 'and is what the key replays');
  t.equal((await counts()).runs - before.runs, 1, 'once');
});

t.test('an over-long key is refused', async (t) => {
  const before = await counts();
  const res = await cp.request('POST', '/v1/test/widgets', { json: { name: 'long' }, headers: { 'idempotency-key': 'k'.repeat(256) } });
  t.equal(res.status, 400);
  t.ok(res.body.errors.some((e: any) => e.field === 'Idempotency-Key'));
  t.same(await counts(), before);
});

t.test('a recorded 4xx outcome replays with its status and a complete error body, without running again', async (t) => {
  const before = await counts();
  const key = crypto.randomUUID();
  const first = await cp.request('POST', '/v1/test/declined', { json: { amount: 5 }, headers: { 'idempotency-key': key } });
  t.equal(first.status, 402);
  t.equal(first.body.code, 'PAYMENT_FAILED');
  t.equal(first.body.request_id, first.headers.get('x-request-id'));
  const again = await cp.request('POST', '/v1/test/declined', { json: { amount: 5 }, headers: { 'idempotency-key': key } });
  t.equal(again.status, 402);
  t.same(again.body, first.body, 'the original error body, request_id included');
  t.equal(again.headers.get('idempotent-replayed'), 'true');
  t.equal((await counts()).runs - before.runs, 1, 'the action ran once');
});
