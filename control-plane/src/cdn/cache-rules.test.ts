// Cache rules through the real server (document 3 §2, §4.4): create with
// defaults, invalid rules → 422 with the reason, bad input → 400, partial
// update with If-Match, enable/disable, delete, lists, roles, idempotency.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers, cdnState, makeEndpoint, uniqueName } from '../../../test/support/cdn.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const { admin, operator, viewer } = await cdnCallers(cp);
const send = caller(cp);
const { endpoint } = await makeEndpoint(cp, admin);
const scoped = `/v1/cdn/distributions/${endpoint.id}/cache-rules`;

async function makeRule(body: Record<string, unknown> = {}) {
  const res = await send(admin, 'POST', scoped, { name: uniqueName('rule'), match: { paths: ['/static/*'] }, ttl_seconds: 3600, ...body });
  if (res.status !== 201) throw new Error(`create cache rule: ${res.status} ${res.text}`);
  return res.body as Record<string, any> & { id: string };
}

t.test('POST .../cache-rules: 201 bare with the documented defaults, Location, ETag, audit-logged', async (t) => {
  const res = await send(admin, 'POST', scoped, { name: 'Static', match: { paths: ['/static/*'] }, ttl_seconds: 86400 });
  t.equal(res.status, 201, res.text);
  t.equal(res.headers.get('location'), `/v1/cdn/cache-rules/${res.body.id}`);
  t.ok(res.headers.get('etag'));
  t.match(res.body, {
    distribution_id: endpoint.id, name: 'Static', enabled: true, priority: 100, match: { paths: ['/static/*'], methods: [], content_types: [] }, ttl_seconds: 86400,
    browser_ttl_seconds: null, cache_key: { include_headers: [], include_query_params: [], exclude_query_params: [], include_cookies: [] },
    bypass: { if_cookie_present: [], if_header_present: [], if_query_param_present: [] }, stale_while_revalidate_seconds: null, stale_if_error_seconds: null,
    negative_ttl_seconds: 10, cache_status_header: true,
  });
  t.equal((await query(cp, `select 1 from audit_log where action = 'cache_rule.created' and resource_id = ?`, [res.body.id])).length, 1);
  const full = {
    name: 'Full', distribution_id: endpoint.id, enabled: false, priority: 3, match: { paths: ['/v/**/*.ts'], methods: ['get'], content_types: ['Video/', 'application/json'] },
    ttl_seconds: 0, browser_ttl_seconds: 60, cache_key: { include_headers: ['Accept-Language'], exclude_query_params: ['utm_source'], include_cookies: ['tier'] },
    bypass: { if_cookie_present: ['session'], if_header_present: ['Authorization'], if_query_param_present: ['nocache'] },
    stale_while_revalidate_seconds: 30, stale_if_error_seconds: 600, negative_ttl_seconds: 0, cache_status_header: false,
  };
  const top = await send(admin, 'POST', '/v1/cdn/cache-rules', full);
  t.equal(top.status, 201, top.text);
  t.match(top.body, { ...full, match: { paths: ['/v/**/*.ts'], methods: ['GET'], content_types: ['video/', 'application/json'] } });
});

t.test('invalid rules are refused with 422 INVALID_CONFIGURATION giving the reason, storing nothing', async (t) => {
  const ok = { name: 'bad', match: { paths: ['/x/*'] }, ttl_seconds: 60 };
  const cases: [Record<string, unknown>, string][] = [
    [{ ...ok, match: {} }, 'match'],
    [{ ...ok, match: { paths: ['static/*'] } }, 'match.paths[0]'],
    [{ ...ok, match: { paths: ['/a/{b'] } }, 'match.paths[0]'],
    [{ ...ok, match: { methods: ['POST'] } }, 'match.methods[0]'],
    [{ ...ok, cache_key: { include_query_params: ['a'], exclude_query_params: ['b'] } }, 'cache_key.exclude_query_params'],
    [{ ...ok, cache_key: { include_headers: ['X-Tenant'] }, bypass: { if_header_present: ['x-tenant'] } }, 'cache_key.include_headers'],
    [{ ...ok, cache_key: { include_cookies: ['s'] }, bypass: { if_cookie_present: ['s'] } }, 'cache_key.include_cookies'],
  ];
  const before = await cdnState(cp);
  for (const [body, field] of cases) {
    for (const [path, extra] of [[scoped, {}], ['/v1/cdn/cache-rules', { distribution_id: endpoint.id }]] as const) {
      const res = await send(admin, 'POST', path, { ...body, ...extra });
      t.equal(res.status, 422, `${field} at ${path} → 422`);
      t.equal(res.body.code, 'INVALID_CONFIGURATION');
      t.ok(res.body.errors?.some((e: { field: string; message: string }) => e.field === field && e.message.length > 10), `says why on ${field}: ${JSON.stringify(res.body.errors)}`);
    }
  }
  const missing = await send(admin, 'POST', '/v1/cdn/cache-rules', { ...ok, distribution_id: crypto.randomUUID() });
  t.equal(missing.status, 422);
  t.equal(missing.body.errors[0].field, 'distribution_id');
  t.same(await cdnState(cp), before, 'nothing stored');
});

t.test('bad input is refused with 400 naming the field, storing nothing', async (t) => {
  const ok = { name: 'bad', match: { paths: ['/x/*'] }, ttl_seconds: 60 };
  const cases: [Record<string, unknown>, string][] = [
    [{ match: { paths: ['/x'] }, ttl_seconds: 1 }, 'name'],
    [{ name: 'n', ttl_seconds: 1 }, 'match'],
    [{ name: 'n', match: { paths: ['/x'] } }, 'ttl_seconds'],
    [{ ...ok, ttl_seconds: -1 }, 'ttl_seconds'],
    [{ ...ok, ttl_seconds: 1.5 }, 'ttl_seconds'],
    [{ ...ok, browser_ttl_seconds: -1 }, 'browser_ttl_seconds'],
    [{ ...ok, stale_if_error_seconds: -5 }, 'stale_if_error_seconds'],
    [{ ...ok, negative_ttl_seconds: -1 }, 'negative_ttl_seconds'],
    [{ ...ok, negative_ttl_seconds: null }, 'negative_ttl_seconds'],
    [{ ...ok, stale_while_revalidate_seconds: 'soon' }, 'stale_while_revalidate_seconds'],
    [{ ...ok, priority: 10001 }, 'priority'],
    [{ ...ok, match: { content_types: ['not a type'] } }, 'match.content_types[0]'],
    [{ ...ok, cache_key: { include_headers: ['bad header'] } }, 'cache_key.include_headers[0]'],
    [{ ...ok, cache_key: { include_query_params: ['a=b'] } }, 'cache_key.include_query_params[0]'],
    [{ ...ok, cache_key: { sort_query: true } }, 'cache_key.sort_query'],
    [{ ...ok, bypass: { if_cookie_present: ['a;b'] } }, 'bypass.if_cookie_present[0]'],
    [{ ...ok, cache_status_header: 'on' }, 'cache_status_header'],
  ];
  const before = await cdnState(cp);
  for (const [body, field] of cases) {
    const res = await send(admin, 'POST', scoped, body);
    t.equal(res.status, 400, `${field} → 400`);
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `names ${field}: ${JSON.stringify(res.body.errors)}`);
  }
  t.equal((await send(admin, 'POST', '/v1/cdn/cache-rules', ok)).status, 400, 'top level needs distribution_id');
  t.same(await cdnState(cp), before, 'nothing stored');
});

t.test('PATCH: partial (objects merge), If-Match 412, 422 on an invalid result; enable/disable and delete, audit-logged', async (t) => {
  const rule = await makeRule({ cache_key: { include_headers: ['Accept'] } });
  const read = await send(viewer, 'GET', `/v1/cdn/cache-rules/${rule.id}`);
  const res = await send(admin, 'PATCH', `/v1/cdn/cache-rules/${rule.id}`, { cache_key: { include_cookies: ['tier'] }, browser_ttl_seconds: 10 }, { 'if-match': read.headers.get('etag')! });
  t.equal(res.status, 200, res.text);
  t.same(res.body.cache_key, { include_headers: ['Accept'], include_query_params: [], exclude_query_params: [], include_cookies: ['tier'] });
  t.equal(res.body.ttl_seconds, 3600);
  const before = await cdnState(cp);
  t.equal((await send(admin, 'PATCH', `/v1/cdn/cache-rules/${rule.id}`, { ttl_seconds: 1 }, { 'if-match': read.headers.get('etag')! })).status, 412);
  const invalid = await send(admin, 'PATCH', `/v1/cdn/cache-rules/${rule.id}`, { bypass: { if_cookie_present: ['tier'] } });
  t.equal(invalid.status, 422);
  t.equal((await send(admin, 'PATCH', `/v1/cdn/cache-rules/${rule.id}`, { match: { paths: [] } })).status, 422, 'a match that states nothing');
  t.same(await cdnState(cp), before, 'nothing changed');
  t.equal((await send(admin, 'POST', `/v1/cdn/cache-rules/${rule.id}/disable`)).body.enabled, false);
  t.equal((await send(admin, 'POST', `/v1/cdn/cache-rules/${rule.id}/enable`)).body.enabled, true);
  t.equal((await send(admin, 'DELETE', `/v1/cdn/cache-rules/${rule.id}`)).status, 204);
  t.equal((await send(viewer, 'GET', `/v1/cdn/cache-rules/${rule.id}`)).status, 404);
  const actions = await query<{ action: string }>(cp, `select action from audit_log where resource_id = ? order by created_at`, [rule.id]);
  t.same(actions.map((a) => a.action), ['cache_rule.created', 'cache_rule.updated', 'cache_rule.disabled', 'cache_rule.enabled', 'cache_rule.deleted']);
});

t.test('lists: distribution-scoped by priority; top level with sort, q, enabled; deleting the endpoint removes its rules', async (t) => {
  const { endpoint: e2 } = await makeEndpoint(cp, admin);
  const tag = `cr${process.pid}`;
  const ids: string[] = [];
  for (const [name, priority] of [['Images', 50], ['Video', 5], ['Api', 500]] as const) {
    const res = await send(admin, 'POST', `/v1/cdn/distributions/${e2.id}/cache-rules`, { name: `${name} ${tag}`, priority, match: { paths: ['/*'] }, ttl_seconds: 1 });
    ids.push(res.body.id);
  }
  await send(admin, 'POST', `/v1/cdn/cache-rules/${ids[2]}/disable`);
  t.same((await send(viewer, 'GET', `/v1/cdn/distributions/${e2.id}/cache-rules`)).body.data.map((r: { priority: number }) => r.priority), [5, 50, 500]);
  const top = await send(viewer, 'GET', `/v1/cdn/cache-rules?q=${tag}&sort=priority&limit=2`);
  t.same(top.body.data.map((r: { priority: number }) => r.priority), [5, 50]);
  t.match(top.body.meta, { total: 3, count: 2, has_more: true });
  t.equal((await send(viewer, 'GET', `/v1/cdn/cache-rules?q=${tag}&enabled=false`)).body.data[0].id, ids[2]);
  t.equal((await send(viewer, 'GET', `/v1/cdn/cache-rules?q=video`)).body.data.some((r: { id: string }) => r.id === ids[1]), true);
  t.equal((await send(admin, 'DELETE', `/v1/cdn/endpoints/${e2.id}`)).status, 204);
  t.equal((await send(viewer, 'GET', `/v1/cdn/cache-rules?q=${tag}`)).body.meta.total, 0, 'gone with their endpoint');
});

t.test('roles: viewers and operators read only (403 on writes, nothing changes)', async (t) => {
  const rule = await makeRule();
  const before = await cdnState(cp);
  for (const who of [viewer, operator]) {
    t.equal((await send(who, 'GET', '/v1/cdn/cache-rules')).status, 200);
    t.equal((await send(who, 'POST', scoped, { name: 'x', match: { paths: ['/x'] }, ttl_seconds: 1 })).status, 403);
    t.equal((await send(who, 'PATCH', `/v1/cdn/cache-rules/${rule.id}`, { ttl_seconds: 1 })).status, 403);
    t.equal((await send(who, 'POST', `/v1/cdn/cache-rules/${rule.id}/disable`)).status, 403);
    t.equal((await send(who, 'DELETE', `/v1/cdn/cache-rules/${rule.id}`)).status, 403);
  }
  t.same(await cdnState(cp), before);
});

t.test('Idempotency-Key: a replay returns the first rule; another body with the key is 422', async (t) => {
  const key = crypto.randomUUID();
  const body = { name: uniqueName('idem'), distribution_id: endpoint.id, match: { paths: ['/i/*'] }, ttl_seconds: 5 };
  const first = await send(admin, 'POST', '/v1/cdn/cache-rules', body, { 'idempotency-key': key });
  const again = await send(admin, 'POST', '/v1/cdn/cache-rules', body, { 'idempotency-key': key });
  t.equal(again.body.id, first.body.id);
  t.equal((await send(admin, 'POST', '/v1/cdn/cache-rules', { ...body, ttl_seconds: 6 }, { 'idempotency-key': key })).body.code, 'IDEMPOTENCY_KEY_REUSED');
});
