// Routes through the real server (document 3 §2, §4.3): create (top level and
// per distribution) with defaults, 422 for an invalid configuration, 400 for
// bad input, partial update with If-Match, enable/disable, delete, lists, roles.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers, cdnState, makeEndpoint, makeOrigin, uniqueName } from '../../../test/support/cdn.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const { admin, operator, viewer } = await cdnCallers(cp);
const send = caller(cp);
const { endpoint, origin } = await makeEndpoint(cp, admin);

async function makeRoute(body: Record<string, unknown> = {}) {
  const res = await send(admin, 'POST', `/v1/cdn/distributions/${endpoint.id}/routes`, { name: uniqueName('route'), origin_id: origin.id, match: { paths: ['/api/*'] }, ...body });
  if (res.status !== 201) throw new Error(`create route: ${res.status} ${res.text}`);
  return res.body as Record<string, any> & { id: string };
}

t.test('POST /v1/cdn/distributions/{id}/routes: 201 bare with defaults, Location, ETag, audit-logged', async (t) => {
  const res = await send(admin, 'POST', `/v1/cdn/distributions/${endpoint.id}/routes`, { name: 'API', origin_id: origin.id, match: { paths: ['/api/*'], methods: ['get', 'HEAD'] } });
  t.equal(res.status, 201, res.text);
  t.equal(res.headers.get('location'), `/v1/cdn/routes/${res.body.id}`);
  t.ok(res.headers.get('etag'));
  t.match(res.body, {
    distribution_id: endpoint.id, origin_id: origin.id, name: 'API', enabled: true, priority: 100, match: { hosts: [], paths: ['/api/*'], methods: ['GET', 'HEAD'] },
    strip_prefix: null, response_headers_policy_id: null, redirect_rules: [], compression_enabled: null,
  });
  t.equal((await query(cp, `select 1 from audit_log where action = 'route.created' and resource_id = ?`, [res.body.id])).length, 1);
});

t.test('POST /v1/cdn/routes (top level) takes the origin\'s distribution, or distribution_id; a free origin joins it', async (t) => {
  const res = await send(admin, 'POST', '/v1/cdn/routes', {
    name: 'Top', origin_id: origin.id, match: { hosts: ['*.example.com', 'media.example.com'] }, priority: 5, strip_prefix: '/v1', compression_enabled: false,
    redirect_rules: [{ type: 'http_to_https' }, { type: 'path', status_code: 302, match_path: '/old/*', redirect_to: '/new/$1' }],
  });
  t.equal(res.status, 201, res.text);
  t.equal(res.body.distribution_id, endpoint.id);
  t.same(res.body.redirect_rules, [
    { type: 'http_to_https', status_code: 301, match_path: '/*', redirect_to: '' }, { type: 'path', status_code: 302, match_path: '/old/*', redirect_to: '/new/$1' },
  ]);
  const free = await makeOrigin(cp, admin);
  const joined = await send(admin, 'POST', '/v1/cdn/routes', { name: 'Free', origin_id: free.id, distribution_id: endpoint.id, match: { paths: ['/free/*'] } });
  t.equal(joined.status, 201, joined.text);
  t.equal((await send(viewer, 'GET', `/v1/cdn/origins/${free.id}`)).body.distribution_id, endpoint.id);
});

t.test('an invalid route is refused with 422 INVALID_CONFIGURATION naming the field, storing nothing', async (t) => {
  const disabled = await makeOrigin(cp, admin, { enabled: false, distribution_id: endpoint.id });
  const other = await makeEndpoint(cp, admin);
  const free = await makeOrigin(cp, admin);
  const ok = { name: 'bad', origin_id: origin.id, match: { paths: ['/x/*'] } };
  const cases: [Record<string, unknown>, string][] = [
    [{ ...ok, origin_id: crypto.randomUUID() }, 'origin_id'],
    [{ ...ok, origin_id: disabled.id }, 'origin_id'],
    [{ ...ok, origin_id: other.origin.id }, 'origin_id'],
    [{ ...ok, match: {} }, 'match'],
    [{ ...ok, match: { paths: [] } }, 'match'],
    [{ ...ok, match: { paths: ['no-slash'] } }, 'match.paths[0]'],
    [{ ...ok, match: { paths: ['/a/{b,c'] } }, 'match.paths[0]'],
    [{ ...ok, match: { paths: ['/a/[x'] } }, 'match.paths[0]'],
    [{ ...ok, match: { paths: ['/ok', '/a b'] } }, 'match.paths[1]'],
    [{ ...ok, match: { hosts: ['a.*.com'] } }, 'match.hosts[0]'],
    [{ ...ok, match: { hosts: ['example.com:8080'] } }, 'match.hosts[0]'],
    [{ ...ok, match: { hosts: ['exa mple.com'] } }, 'match.hosts[0]'],
    [{ ...ok, response_headers_policy_id: crypto.randomUUID() }, 'response_headers_policy_id'],
    [{ ...ok, redirect_rules: [{ type: 'path', match_path: '/old', redirect_to: '/new/$1' }] }, 'redirect_rules[0].redirect_to'],
    [{ ...ok, redirect_rules: [{ type: 'path', match_path: 'old/*', redirect_to: '/new' }] }, 'redirect_rules[0].match_path'],
    // The edge's own redirect compiler (shared/src/match/redirect.ts) decides these.
    [{ ...ok, redirect_rules: [{ type: 'path', match_path: '/a/*', redirect_to: 'https://$1.example.com/' }] }, 'redirect_rules[0].redirect_to'],
    [{ ...ok, redirect_rules: [{ type: 'path', match_path: '/a/{b,*}', redirect_to: '/c' }] }, 'redirect_rules[0].match_path'],
    [{ ...ok, redirect_rules: [{ type: 'path', match_path: '/a/*', redirect_to: '/c' }, { type: 'path', match_path: '/b/*', redirect_to: '/d/$2' }] }, 'redirect_rules[1].redirect_to'],
  ];
  const before = await cdnState(cp);
  for (const [body, field] of cases) {
    for (const [path, extra] of [[`/v1/cdn/distributions/${endpoint.id}/routes`, {}], ['/v1/cdn/routes', { distribution_id: endpoint.id }]] as const) {
      const res = await send(admin, 'POST', path, { ...body, ...extra });
      t.equal(res.status, 422, `${JSON.stringify(body)} at ${path} → 422`);
      t.equal(res.body.code, 'INVALID_CONFIGURATION');
      t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `names ${field}: ${JSON.stringify(res.body.errors)}`);
    }
  }
  const noDistribution = await send(admin, 'POST', '/v1/cdn/routes', { ...ok, origin_id: free.id });
  t.equal(noDistribution.status, 422);
  t.equal(noDistribution.body.errors[0].field, 'distribution_id');
  t.same(await cdnState(cp), before, 'nothing stored');
  t.equal((await send(admin, 'POST', `/v1/cdn/distributions/${endpoint.id}/routes`, { ...ok, origin_id: disabled.id, enabled: false })).status, 201,
    'a disabled route may point at a disabled origin');
});

t.test('bad input is refused with 400 naming the field, storing nothing', async (t) => {
  const ok = { name: 'bad', origin_id: origin.id, match: { paths: ['/x/*'] } };
  const cases: [Record<string, unknown>, string][] = [
    [{ origin_id: origin.id, match: { paths: ['/x'] } }, 'name'],
    [{ name: 'n', match: { paths: ['/x'] } }, 'origin_id'],
    [{ name: 'n', origin_id: origin.id }, 'match'],
    [{ ...ok, priority: -1 }, 'priority'],
    [{ ...ok, priority: 10001 }, 'priority'],
    [{ ...ok, match: { methods: ['FETCH'] } }, 'match.methods[0]'],
    [{ ...ok, match: { paths: ['/x'], extra: [] } }, 'match.extra'],
    [{ ...ok, strip_prefix: 'api' }, 'strip_prefix'],
    [{ ...ok, redirect_rules: [{ type: 'teleport' }] }, 'redirect_rules[0].type'],
    [{ ...ok, redirect_rules: [{ type: 'path', status_code: 200, redirect_to: '/x' }] }, 'redirect_rules[0].status_code'],
    [{ ...ok, redirect_rules: [{ type: 'path' }] }, 'redirect_rules[0].redirect_to'],
    [{ ...ok, compression_enabled: 'yes' }, 'compression_enabled'],
    [{ ...ok, distribution_id: endpoint.id }, 'distribution_id'],
  ];
  const before = await cdnState(cp);
  for (const [body, field] of cases) {
    const res = await send(admin, 'POST', `/v1/cdn/distributions/${endpoint.id}/routes`, body);
    t.equal(res.status, 400, `${field} → 400`);
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `names ${field}: ${JSON.stringify(res.body.errors)}`);
  }
  t.equal((await send(admin, 'POST', `/v1/cdn/distributions/${crypto.randomUUID()}/routes`, ok)).status, 404);
  t.same(await cdnState(cp), before, 'nothing stored');
});

t.test('PATCH: partial (match members merge), If-Match 412, 422 on a bad change; enabling checks the origin', async (t) => {
  const route = await makeRoute({ match: { paths: ['/a/*'], methods: ['GET'] } });
  const read = await send(viewer, 'GET', `/v1/cdn/routes/${route.id}`);
  const res = await send(admin, 'PATCH', `/v1/cdn/routes/${route.id}`, { match: { hosts: ['media.example.com'] }, priority: 7 }, { 'if-match': read.headers.get('etag')! });
  t.equal(res.status, 200, res.text);
  t.same(res.body.match, { hosts: ['media.example.com'], paths: ['/a/*'], methods: ['GET'] });
  t.equal(res.body.priority, 7);
  const before = await cdnState(cp);
  t.equal((await send(admin, 'PATCH', `/v1/cdn/routes/${route.id}`, { name: 'x' }, { 'if-match': read.headers.get('etag')! })).status, 412);
  t.equal((await send(admin, 'PATCH', `/v1/cdn/routes/${route.id}`, { match: { paths: ['bad'] } })).status, 422);
  t.equal((await send(admin, 'PATCH', `/v1/cdn/routes/${route.id}`, { origin_id: crypto.randomUUID() })).status, 422);
  t.same(await cdnState(cp), before, 'nothing changed');
  const cleared = await send(admin, 'PATCH', `/v1/cdn/routes/${route.id}`, { strip_prefix: '/a' });
  t.equal(cleared.body.strip_prefix, '/a');
  t.equal((await send(admin, 'PATCH', `/v1/cdn/routes/${route.id}`, { strip_prefix: null })).body.strip_prefix, null);

  const spare = await makeOrigin(cp, admin, { distribution_id: endpoint.id });
  const offRoute = await makeRoute({ origin_id: spare.id, enabled: false });
  t.equal((await send(admin, 'POST', `/v1/cdn/origins/${spare.id}/disable`)).status, 200, 'only a disabled route uses it');
  const enable = await send(admin, 'POST', `/v1/cdn/routes/${offRoute.id}/enable`);
  t.equal(enable.status, 422, 'enabling a route whose origin is disabled');
  t.equal(enable.body.errors[0].field, 'origin_id');
  await send(admin, 'POST', `/v1/cdn/origins/${spare.id}/enable`);
  t.equal((await send(admin, 'POST', `/v1/cdn/routes/${offRoute.id}/enable`)).body.enabled, true);
  t.equal((await send(admin, 'POST', `/v1/cdn/origins/${spare.id}/disable`)).status, 422, 'now an enabled route uses it');
  t.equal((await send(admin, 'DELETE', `/v1/cdn/origins/${spare.id}`)).status, 409);
  t.equal((await send(admin, 'POST', `/v1/cdn/routes/${offRoute.id}/disable`)).body.enabled, false);
  t.equal((await send(admin, 'DELETE', `/v1/cdn/routes/${offRoute.id}`)).status, 204);
  t.equal((await send(admin, 'DELETE', `/v1/cdn/origins/${spare.id}`)).status, 204, 'free again');
  const actions = await query<{ action: string }>(cp, `select action from audit_log where resource_id = ? order by created_at`, [offRoute.id]);
  t.same(actions.map((a) => a.action), ['route.created', 'route.enabled', 'route.disabled', 'route.deleted']);
});

t.test('lists: distribution-scoped in priority order; top level with sort, q and filters', async (t) => {
  const { endpoint: e2, origin: o2 } = await makeEndpoint(cp, admin);
  const tag = `rt${process.pid}`;
  for (const [name, priority] of [['Gamma', 30], ['Alpha', 10], ['Beta', 20]] as const) {
    const res = await send(admin, 'POST', `/v1/cdn/distributions/${e2.id}/routes`, { name: `${name} ${tag}`, origin_id: o2.id, priority, match: { paths: ['/*'] } });
    t.equal(res.status, 201);
  }
  const scoped = await send(viewer, 'GET', `/v1/cdn/distributions/${e2.id}/routes`);
  t.same(scoped.body.data.map((r: { priority: number }) => r.priority), [10, 20, 30]);
  const top = await send(viewer, 'GET', `/v1/cdn/routes?q=${tag}&sort=-name&limit=2`);
  t.same(top.body.data.map((r: { name: string }) => r.name), [`Gamma ${tag}`, `Beta ${tag}`]);
  t.match(top.body.meta, { total: 3, has_more: true });
  t.equal((await send(viewer, 'GET', `/v1/cdn/routes?origin_id=${o2.id}`)).body.meta.total, 3);
  t.equal((await send(viewer, 'GET', `/v1/cdn/routes?origin_id=${o2.id}&enabled=false`)).body.meta.total, 0);
  for (const bad of ['sort=origin', 'origin_id=x', 'enabled=1']) t.equal((await send(viewer, 'GET', `/v1/cdn/routes?${bad}`)).status, 400, bad);
});

t.test('roles: viewers and operators read only (403 on writes, nothing changes)', async (t) => {
  const route = await makeRoute();
  const before = await cdnState(cp);
  for (const who of [viewer, operator]) {
    t.equal((await send(who, 'GET', `/v1/cdn/routes/${route.id}`)).status, 200);
    t.equal((await send(who, 'POST', '/v1/cdn/routes', { name: 'x', origin_id: origin.id, match: { paths: ['/x'] } })).status, 403);
    t.equal((await send(who, 'PATCH', `/v1/cdn/routes/${route.id}`, { name: 'x' })).status, 403);
    t.equal((await send(who, 'POST', `/v1/cdn/routes/${route.id}/disable`)).status, 403);
    t.equal((await send(who, 'DELETE', `/v1/cdn/routes/${route.id}`)).status, 403);
  }
  t.same(await cdnState(cp), before);
});

t.test('Idempotency-Key: a replay returns the first route', async (t) => {
  const key = crypto.randomUUID();
  const body = { name: uniqueName('idem'), origin_id: origin.id, match: { paths: ['/i/*'] } };
  const first = await send(admin, 'POST', '/v1/cdn/routes', body, { 'idempotency-key': key });
  const again = await send(admin, 'POST', '/v1/cdn/routes', body, { 'idempotency-key': key });
  t.equal(again.body.id, first.body.id);
  t.equal((await query(cp, 'select 1 from cdn_route where name = ?', [body.name])).length, 1);
});
