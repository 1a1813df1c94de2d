// The caps on log drains through the real server: at most MAX_DRAINS_PER_ENDPOINT
// drains send one endpoint's logs (those naming it and those for every
// endpoint) and MAX_LOG_DRAINS exist in all; a create or an update beyond a
// cap is 409 LOG_DRAIN_LIMIT_REACHED naming the endpoints, and stores nothing;
// concurrent creates at the cap cannot pass it together.
import t from 'tap';
import { query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers, makeEndpoint, uniqueName } from '../../../test/support/cdn.ts';
import { policiesState } from '../../../test/support/cdn-policies.ts';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { MAX_DRAINS_PER_ENDPOINT, MAX_LOG_DRAINS } from './log-drain-record.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const { admin } = await cdnCallers(cp);
const send = caller(cp);
const base = '/v1/cdn/log-drains';
const body = (extra: Record<string, unknown> = {}) => ({
  name: uniqueName('drain'), destination_type: 'datadog', destination_config: { site: 'datadoghq.eu', api_key: 'dd-limits-key-0001' }, ...extra,
});
async function makeDrain(extra: Record<string, unknown> = {}, path = base) {
  const res = await send(admin, 'POST', path, body(extra));
  if (res.status !== 201) throw new Error(`create drain: ${res.status} ${res.text}`);
  return res.body as { id: string };
}
const drainCount = async () => (await query<{ n: number }>(cp, 'select count(*)::int as n from cdn_log_drain'))[0]!.n;

t.test(`an endpoint has its logs sent by at most ${MAX_DRAINS_PER_ENDPOINT} drains (counting those for every endpoint): beyond, 409 and nothing stored`, async (t) => {
  const { endpoint: e } = await makeEndpoint(cp, admin);
  const { endpoint: f } = await makeEndpoint(cp, admin);
  const every = await makeDrain();
  const mine: { id: string }[] = [];
  for (let i = 1; i < MAX_DRAINS_PER_ENDPOINT - 1; i++) mine.push(await makeDrain({ endpoint_ids: [e.id] }));
  mine.push(await makeDrain({}, `/v1/cdn/distributions/${e.id}/log-drains`));
  const forF = await makeDrain({ endpoint_ids: [f.id] });

  const before = await policiesState(cp);
  const audits = (await query(cp, `select 1 from audit_log where resource_type = 'log_drain'`)).length;
  const refused: [string, string, Record<string, unknown>, string[]][] = [
    ['a drain naming it', base, { endpoint_ids: [e.id] }, ['endpoint_ids[0]']],
    ['a drain naming it second', base, { endpoint_ids: [f.id, e.id] }, ['endpoint_ids[1]']],
    ['the distribution-scoped create', `/v1/cdn/distributions/${e.id}/log-drains`, {}, ['endpoint_ids[0]']],
    ['a drain for every endpoint', base, {}, ['endpoint_ids']],
  ];
  for (const [what, path, extra, fields] of refused) {
    const res = await send(admin, 'POST', path, body(extra));
    t.equal(res.status, 409, `${what}: ${res.text}`);
    t.equal(res.body.code, 'LOG_DRAIN_LIMIT_REACHED');
    t.same(res.body.errors.map((x: { field: string }) => x.field), fields, `${what}: names the endpoint`);
    t.match(res.body.errors[0].message, new RegExp(e.id));
  }
  const widened = await send(admin, 'PATCH', `${base}/${forF.id}`, { endpoint_ids: [f.id, e.id] });
  t.equal(widened.status, 409, 'an update that adds the endpoint');
  t.same(widened.body.errors.map((x: { field: string }) => x.field), ['endpoint_ids[1]']);
  t.equal((await send(admin, 'PATCH', `${base}/${forF.id}`, { endpoint_ids: [] })).status, 409, 'an update to every endpoint');
  t.same(await policiesState(cp), before, 'nothing stored');
  t.equal((await query(cp, `select 1 from audit_log where resource_type = 'log_drain'`)).length, audits, 'nothing audit-logged');

  // A drain already at the endpoint may change (its own place counts once), and other endpoints are not limited by it.
  t.equal((await send(admin, 'PATCH', `${base}/${mine[0]!.id}`, { endpoint_ids: [e.id, f.id], name: 'still one place' })).status, 200);
  t.equal((await send(admin, 'POST', base, body({ endpoint_ids: [f.id] }))).status, 201, 'another endpoint takes drains');
  // One place freed: one more.
  t.equal((await send(admin, 'DELETE', `${base}/${every.id}`)).status, 204);
  t.equal((await send(admin, 'POST', base, body({ endpoint_ids: [e.id] }))).status, 201, 'a place freed is taken');
  t.equal((await send(admin, 'POST', base, body({ endpoint_ids: [e.id] }))).status, 409, 'and the cap holds again');
});

t.test(`at most ${MAX_LOG_DRAINS} drains in all: beyond, 409 and nothing stored; concurrent creates at the cap cannot pass it together`, async (t) => {
  const endpoints: string[] = [];
  for (let i = 0; i < Math.ceil(MAX_LOG_DRAINS / (MAX_DRAINS_PER_ENDPOINT - 1)) + 1; i++) endpoints.push((await makeEndpoint(cp, admin)).endpoint.id);
  // Fill to one below the cap, spread so that no endpoint is full.
  for (let i = await drainCount(); i < MAX_LOG_DRAINS - 1; i++) await makeDrain({ endpoint_ids: [endpoints[i % endpoints.length]] });
  t.equal(await drainCount(), MAX_LOG_DRAINS - 1);
  const last = endpoints.at(-1)!;
  const answers = await Promise.all(Array.from({ length: 5 }, () => send(admin, 'POST', base, body({ endpoint_ids: [last] }))));
  t.same(answers.map((a) => a.status).sort(), [201, 409, 409, 409, 409], 'one of five concurrent creates takes the last place');
  t.equal(await drainCount(), MAX_LOG_DRAINS);
  const before = await policiesState(cp);
  const over = await send(admin, 'POST', base, body({ endpoint_ids: [last] }));
  t.equal(over.status, 409, over.text);
  t.equal(over.body.code, 'LOG_DRAIN_LIMIT_REACHED');
  t.match(over.body.message, new RegExp(`most log drains allowed \\(${MAX_LOG_DRAINS}\\)`));
  t.same(await policiesState(cp), before, 'nothing stored');
  const bad = await send(admin, 'POST', base, { ...body(), destination_type: 'kafka' });
  t.equal(bad.status, 400, 'bad input is still 400 first');
});
