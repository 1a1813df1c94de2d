// Prefetch jobs through the real server (document 3 §2, §4.1): 202 pending
// with total = the URLs, fetched and failed 0; URLs only on the endpoint's
// hostnames; the limits; read per endpoint; roles; Idempotency-Key; audit.
// (URLs on custom domains: domains.test.ts.)
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers, makeEndpoint } from '../../../test/support/cdn.ts';

const cp = await startTestControlPlane(t, { env: { ...RELAXED_LIMITS, CDN_DOMAIN: 'edge.example.net' } });
const { admin, operator, viewer, subscriber } = await cdnCallers(cp);
const send = caller(cp);
const { endpoint } = await makeEndpoint(cp, admin);
const host = endpoint.hostname as string;

const jobRows = async () => ({
  jobs: await query(cp, `select * from cdn_prefetch_job order by id`),
  audit: (await query<{ n: number }>(cp, `select count(*)::int as n from audit_log`))[0]!.n,
});

t.test('POST /v1/cdn/endpoints/{id}/prefetch: 202 pending, total = the URLs, fetched and failed 0, priority normal by default; readable; audit-logged', async (t) => {
  const urls = [`https://${host}/videos/a.mp4`, `http://${host.toUpperCase()}/index.html?v=1`];
  const res = await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/prefetch`, { urls });
  t.equal(res.status, 202, res.text);
  t.match(res.body, { endpoint_id: endpoint.id, status: 'pending', priority: 'normal', total: 2, fetched: 0, failed: 0, failed_urls: [], completed_at: null });
  t.equal(res.headers.get('location'), `/v1/cdn/endpoints/${endpoint.id}/prefetch/${res.body.id}`);
  const read = await send(viewer, 'GET', `/v1/cdn/endpoints/${endpoint.id}/prefetch/${res.body.id}`);
  t.equal(read.status, 200);
  t.same(read.body, res.body);
  const high = await send(admin, 'POST', `/v1/cdn/endpoints/${endpoint.id}/prefetch`, { urls: [`https://${host}/x`], priority: 'high' });
  t.equal(high.body.priority, 'high');
  const audit = await query<{ metadata: any }>(cp, `select metadata from audit_log where action = 'prefetch.submitted' and resource_id = ?`, [res.body.id]);
  t.match(audit[0]?.metadata, { endpoint_id: endpoint.id, urls: 2, priority: 'normal' });
});

t.test('500 URLs are accepted', async (t) => {
  const urls = Array.from({ length: 500 }, (_, i) => `https://${host}/v/${i}.ts`);
  const res = await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/prefetch`, { urls });
  t.equal(res.status, 202);
  t.equal(res.body.total, 500);
});

t.test('bad input is refused with 400 naming the field (the index of a bad URL), storing nothing', async (t) => {
  const { endpoint: other } = await makeEndpoint(cp, admin);
  const ok = `https://${host}/a`;
  const cases: [Record<string, unknown>, string][] = [
    [{}, 'urls'],
    [{ urls: [] }, 'urls'],
    [{ urls: Array.from({ length: 501 }, (_, i) => `https://${host}/${i}`) }, 'urls'],
    [{ urls: [ok, '/videos/a.mp4'] }, 'urls[1]'],
    [{ urls: ['ftp://' + host + '/a'] }, 'urls[0]'],
    [{ urls: [`https://user:pw@${host}/a`] }, 'urls[0]'],
    [{ urls: [`https://${host}/a#frag`] }, 'urls[0]'],
    [{ urls: [`https://${host}/` + 'a'.repeat(2048)] }, 'urls[0]'],
    [{ urls: [ok, 'https://example.com/a'] }, 'urls[1]'],
    [{ urls: [ok, `https://${other.hostname}/a`] }, 'urls[1]'],
    [{ urls: [ok], priority: 'urgent' }, 'priority'],
    [{ urls: [ok], scope: 'all' }, 'scope'],
    [{ urls: ok }, 'urls'],
  ];
  const before = await jobRows();
  for (const [body, field] of cases) {
    const res = await send(admin, 'POST', `/v1/cdn/endpoints/${endpoint.id}/prefetch`, body);
    t.equal(res.status, 400, `${JSON.stringify(body).slice(0, 80)} → 400`);
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `names ${field}: ${JSON.stringify(res.body.errors)?.slice(0, 300)}`);
  }
  t.equal((await send(admin, 'POST', `/v1/cdn/endpoints/${crypto.randomUUID()}/prefetch`, { urls: [ok] })).status, 404);
  t.same(await jobRows(), before, 'nothing stored');
});

t.test('a job is read through its own endpoint only (another endpoint → 404)', async (t) => {
  const { endpoint: other } = await makeEndpoint(cp, admin);
  const job = (await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/prefetch`, { urls: [`https://${host}/z`] })).body;
  t.equal((await send(viewer, 'GET', `/v1/cdn/endpoints/${other.id}/prefetch/${job.id}`)).status, 404);
  t.equal((await send(viewer, 'GET', `/v1/cdn/endpoints/${endpoint.id}/prefetch/${crypto.randomUUID()}`)).status, 404);
  t.equal((await send(viewer, 'GET', `/v1/cdn/endpoints/${endpoint.id}/prefetch/nope`)).status, 400);
});

t.test('roles: operators and admins prefetch; viewers and subscribers 403; anonymous 401; nothing stored', async (t) => {
  const before = await jobRows();
  const body = { urls: [`https://${host}/a`] };
  t.equal((await send(viewer, 'POST', `/v1/cdn/endpoints/${endpoint.id}/prefetch`, body)).status, 403);
  t.equal((await send(subscriber, 'POST', `/v1/cdn/endpoints/${endpoint.id}/prefetch`, body)).status, 403);
  t.equal((await send(null, 'POST', `/v1/cdn/endpoints/${endpoint.id}/prefetch`, body)).status, 401);
  t.same(await jobRows(), before);
});

t.test('Idempotency-Key: a replay returns the original job and stores nothing more', async (t) => {
  const headers = { 'idempotency-key': crypto.randomUUID() };
  const body = { urls: [`https://${host}/idem`] };
  const first = await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/prefetch`, body, headers);
  const before = await jobRows();
  const replay = await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/prefetch`, body, headers);
  t.equal(replay.status, 202);
  t.same(replay.body, first.body);
  t.same(await jobRows(), before);
});
