import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { createWidgetTable, Widget, widgetRoutes } from '../../../test/support/widgets-fixture.ts';

const cp = await startTestControlPlane(t, { extraEntities: [Widget], extraRoutes: widgetRoutes, env: { BODY_LIMIT_BYTES: '2048' } });
await createWidgetTable(cp.database.db);
const widgetCount = async () => (await cp.database.db.orm.em.fork().getConnection().execute('select count(*)::int as n from test_widget'))[0].n;

const badBodies: [string, unknown, string][] = [
  ['wrong type', { name: 'ok', size: 'big' }, 'size'],
  ['too long', { name: 'a'.repeat(21) }, 'name'],
  ['bad pattern', { name: 'Has Spaces' }, 'name'],
  ['out of range', { name: 'ok', size: 11 }, 'size'],
  ['not an integer', { name: 'ok', size: 1.5 }, 'size'],
  ['missing required', { size: 2 }, 'name'],
  ['unknown field', { name: 'ok', colour: 'red' }, 'colour'],
  ['null for a required string', { name: null }, 'name'],
];

for (const [what, body, field] of badBodies) {
  t.test(`POST refuses ${what} with 400 VALIDATION_ERROR naming ${field}, storing nothing`, async (t) => {
    const before = await widgetCount();
    const res = await cp.request('POST', '/v1/test/widgets', { json: body });
    t.equal(res.status, 400);
    t.equal(res.body.code, 'VALIDATION_ERROR');
    t.type(res.body.message, 'string');
    t.ok(Array.isArray(res.body.errors));
    t.ok(res.body.errors.some((e: any) => e.field === field && typeof e.message === 'string'), JSON.stringify(res.body.errors));
    t.equal(await widgetCount(), before);
  });
}

t.test('several bad fields are all reported', async (t) => {
  const res = await cp.request('POST', '/v1/test/widgets', { json: { name: 'BAD', size: 0, extra: 1 } });
  t.same(res.body.errors.map((e: any) => e.field).sort(), ['extra', 'name', 'size']);
});

t.test('malformed JSON is a 400, not a 500', async (t) => {
  const before = await widgetCount();
  const res = await cp.request('POST', '/v1/test/widgets', { body: '{"name": "x",', headers: { 'content-type': 'application/json' } });
  t.equal(res.status, 400);
  t.equal(res.body.code, 'VALIDATION_ERROR');
  t.equal(await widgetCount(), before);
});

t.test('a JSON scalar or array body is refused', async (t) => {
  for (const body of ['"text"', '[1,2]', '42']) {
    const res = await cp.request('POST', '/v1/test/widgets', { body, headers: { 'content-type': 'application/json' } });
    t.equal(res.status, 400, body);
  }
});

t.test('a body that is not JSON gets 415', async (t) => {
  const before = await widgetCount();
  const res = await cp.request('POST', '/v1/test/widgets', { body: 'name=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
  t.equal(res.status, 415);
  t.equal(res.body.code, 'UNSUPPORTED_MEDIA_TYPE');
  t.equal(await widgetCount(), before);
});

t.test('a body over the size limit gets 413', async (t) => {
  const before = await widgetCount();
  const res = await cp.request('POST', '/v1/test/widgets', { json: { name: 'big', padding: 'x'.repeat(5000) } });
  t.equal(res.status, 413);
  t.equal(res.body.code, 'PAYLOAD_TOO_LARGE');
  t.equal(await widgetCount(), before);
});

t.test('an empty body validates as an empty object', async (t) => {
  const res = await cp.request('POST', '/v1/test/widgets', { headers: { 'content-type': 'application/json' } });
  t.equal(res.status, 400);
  t.ok(res.body.errors.some((e: any) => e.field === 'name'));
});
