// Response header policies through the real server (document 3 §2, §4.7):
// defaults, validation (400 and 422), partial update with If-Match, the
// reference checks of endpoints and routes (422) and delete while referenced
// (409), distribution-scoped list and create, lists, roles, idempotency.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers, makeEndpoint, uniqueName } from '../../../test/support/cdn.ts';
import { policiesState } from '../../../test/support/cdn-policies.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const { admin, operator, viewer, subscriber } = await cdnCallers(cp);
const send = caller(cp);
const base = '/v1/cdn/response-headers-policies';

async function makePolicy(body: Record<string, unknown> = {}) {
  const res = await send(admin, 'POST', base, { name: uniqueName('policy'), ...body });
  if (res.status !== 201) throw new Error(`create policy: ${res.status} ${res.text}`);
  return res.body as Record<string, any> & { id: string };
}

t.test('POST /v1/cdn/response-headers-policies: 201 bare with every default, Location, ETag, audit-logged', async (t) => {
  const res = await send(admin, 'POST', base, { name: 'Defaults' });
  t.equal(res.status, 201, res.text);
  t.equal(res.headers.get('location'), `${base}/${res.body.id}`);
  t.ok(res.headers.get('etag'));
  t.same(res.body, {
    id: res.body.id, name: 'Defaults', description: '',
    cors: { enabled: false, allow_origins: ['*'], allow_methods: ['GET', 'HEAD'], allow_headers: [], expose_headers: [], allow_credentials: false, max_age_seconds: null, override_origin: true },
    security_headers: {
      strict_transport_security: { enabled: false, max_age_seconds: 31536000, include_subdomains: false, preload: false, override: true },
      content_security_policy: { enabled: false, policy: '', report_only: false, override: true },
      x_content_type_options: { enabled: false, override: true },
      x_frame_options: { enabled: false, value: 'DENY', override: true },
      referrer_policy: { enabled: false, value: 'strict-origin-when-cross-origin', override: true },
      permissions_policy: { enabled: false, policy: '', override: true },
      x_xss_protection: { enabled: false, value: '0', override: true },
    },
    custom_response_headers: [], custom_request_headers: [], remove_response_headers: [], remove_request_headers: [],
    created_at: res.body.created_at, updated_at: res.body.updated_at,
  });
  const [audit] = await query<{ actor_id: string }>(cp, `select actor_id from audit_log where action = 'response_headers_policy.created' and resource_id = ?`, [res.body.id]);
  t.equal(audit?.actor_id, admin.id);
});

t.test('a full policy is stored as sent; nested members not sent take their defaults', async (t) => {
  const res = await send(admin, 'POST', base, {
    name: 'Full', description: 'Security for the player',
    cors: { enabled: true, allow_origins: ['https://player.example.com', 'https://*.example.org'], allow_methods: ['get', 'OPTIONS'], allow_credentials: true, max_age_seconds: 600 },
    security_headers: {
      strict_transport_security: { enabled: true, include_subdomains: true, preload: true, max_age_seconds: 63072000 },
      content_security_policy: { enabled: true, policy: "default-src 'self'", report_only: true },
      x_frame_options: { enabled: true, value: 'SAMEORIGIN', override: false },
    },
    custom_response_headers: [{ name: 'X-Served-By', value: 'edge' }, { name: 'Cache-Tag', value: 'a, b', override: false }],
    custom_request_headers: [{ name: 'X-From-Cdn', value: '1' }],
    remove_response_headers: ['Server', 'X-Powered-By'],
    remove_request_headers: ['Cookie'],
  });
  t.equal(res.status, 201, res.text);
  t.match(res.body, {
    description: 'Security for the player',
    cors: { enabled: true, allow_methods: ['GET', 'OPTIONS'], allow_credentials: true, max_age_seconds: 600, override_origin: true, allow_headers: [] },
    security_headers: {
      strict_transport_security: { enabled: true, include_subdomains: true, preload: true, max_age_seconds: 63072000, override: true },
      content_security_policy: { enabled: true, policy: "default-src 'self'", report_only: true, override: true },
      x_frame_options: { enabled: true, value: 'SAMEORIGIN', override: false },
      referrer_policy: { enabled: false },
    },
    custom_response_headers: [{ name: 'X-Served-By', value: 'edge', override: true }, { name: 'Cache-Tag', value: 'a, b', override: false }],
  });
});

t.test('bad input is refused with 400 naming the field, storing nothing', async (t) => {
  const cases: [Record<string, unknown>, string][] = [
    [{}, 'name'],
    [{ name: 'x'.repeat(101) }, 'name'],
    [{ name: 'n', description: 'x'.repeat(501) }, 'description'],
    [{ name: 'n', custom_response_headers: [{ name: 'Bad Name', value: 'v' }] }, 'custom_response_headers[0].name'],
    [{ name: 'n', custom_response_headers: [{ name: 'X(y)', value: 'v' }] }, 'custom_response_headers[0].name'],
    [{ name: 'n', custom_response_headers: [{ name: 'X-A', value: 'a\r\nSet-Cookie: x=1' }] }, 'custom_response_headers[0].value'],
    [{ name: 'n', custom_response_headers: [{ name: 'X-A', value: 'a\nb' }] }, 'custom_response_headers[0].value'],
    [{ name: 'n', custom_response_headers: [{ name: 'X-A', value: 'a\u0000b' }] }, 'custom_response_headers[0].value'],
    [{ name: 'n', custom_response_headers: [{ name: 'X-A', value: 'bell\u0007' }] }, 'custom_response_headers[0].value'],
    [{ name: 'n', custom_response_headers: [{ name: 'X-A', value: 'price \u20ac5' }] }, 'custom_response_headers[0].value'],
    [{ name: 'n', custom_response_headers: [{ name: 'X-A', value: 'x'.repeat(4097) }] }, 'custom_response_headers[0].value'],
    [{ name: 'n', custom_response_headers: [{ name: 'Connection', value: 'close' }] }, 'custom_response_headers[0].name'],
    [{ name: 'n', custom_response_headers: [{ name: 'transfer-encoding', value: 'chunked' }] }, 'custom_response_headers[0].name'],
    [{ name: 'n', custom_request_headers: [{ name: 'Host', value: 'evil.test' }] }, 'custom_request_headers[0].name'],
    [{ name: 'n', custom_request_headers: [{ name: 'X-A', value: '1' }, { name: 'x-a', value: '2' }] }, 'custom_request_headers'],
    [{ name: 'n', custom_request_headers: [{ name: 'X-A', value: '1', extra: true }] }, 'custom_request_headers[0].extra'],
    [{ name: 'n', remove_response_headers: ['Keep-Alive'] }, 'remove_response_headers[0]'],
    [{ name: 'n', remove_response_headers: ['Content-Encoding'] }, 'remove_response_headers[0]'],
    [{ name: 'n', remove_request_headers: ['x'.repeat(257)] }, 'remove_request_headers[0]'],
    [{ name: 'n', remove_request_headers: ['bad name'] }, 'remove_request_headers[0]'],
    [{ name: 'n', cors: { max_age_seconds: -1 } }, 'cors.max_age_seconds'],
    [{ name: 'n', cors: { max_age_seconds: 86401 } }, 'cors.max_age_seconds'],
    [{ name: 'n', cors: { allow_methods: ['FETCH'] } }, 'cors.allow_methods[0]'],
    [{ name: 'n', cors: { allow_origins: ['example.com'] } }, 'cors.allow_origins[0]'],
    [{ name: 'n', cors: { allow_origins: ['https://*'] } }, 'cors.allow_origins[0]'],
    [{ name: 'n', cors: { allow_origins: ['https://a..example'] } }, 'cors.allow_origins[0]'],
    [{ name: 'n', cors: { allow_origins: [] } }, 'cors.allow_origins'],
    [{ name: 'n', cors: { colour: 'red' } }, 'cors.colour'],
    [{ name: 'n', security_headers: { strict_transport_security: { max_age_seconds: 63072001 } } }, 'security_headers.strict_transport_security.max_age_seconds'],
    [{ name: 'n', security_headers: { content_security_policy: { policy: 'x'.repeat(4097) } } }, 'security_headers.content_security_policy.policy'],
    [{ name: 'n', security_headers: { content_security_policy: { policy: "default-src 'self'\r\nX-Injected: 1" } } }, 'security_headers.content_security_policy.policy'],
    [{ name: 'n', security_headers: { permissions_policy: { policy: 'x'.repeat(4097) } } }, 'security_headers.permissions_policy.policy'],
    [{ name: 'n', security_headers: { x_frame_options: { value: 'ALLOW-FROM https://a' } } }, 'security_headers.x_frame_options.value'],
    [{ name: 'n', security_headers: { referrer_policy: { value: 'sometimes' } } }, 'security_headers.referrer_policy.value'],
    [{ name: 'n', security_headers: { x_xss_protection: { value: '2' } } }, 'security_headers.x_xss_protection.value'],
    [{ name: 'n', security_headers: { expect_ct: { enabled: true } } }, 'security_headers.expect_ct'],
    [{ name: 'n', id: crypto.randomUUID() }, 'id'],
  ];
  const before = await policiesState(cp);
  for (const [body, field] of cases) {
    const res = await send(admin, 'POST', base, body);
    t.equal(res.status, 400, `${JSON.stringify(body).slice(0, 120)} → 400`);
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `names ${field}: ${JSON.stringify(res.body.errors)}`);
  }
  t.same(await policiesState(cp), before, 'nothing stored');
});

t.test('a policy the edge could not serve is refused with 422 INVALID_CONFIGURATION, storing nothing', async (t) => {
  const cases: [Record<string, unknown>, string][] = [
    [{ cors: { enabled: true, allow_credentials: true } }, 'cors.allow_credentials'],
    [{ security_headers: { strict_transport_security: { enabled: true, preload: true } } }, 'security_headers.strict_transport_security.preload'],
    [{ security_headers: { strict_transport_security: { preload: true, include_subdomains: true, max_age_seconds: 600 } } }, 'security_headers.strict_transport_security.preload'],
    [{ security_headers: { content_security_policy: { enabled: true } } }, 'security_headers.content_security_policy.policy'],
    [{ security_headers: { permissions_policy: { enabled: true, policy: '  ' } } }, 'security_headers.permissions_policy.policy'],
    [{ custom_response_headers: [{ name: 'Server', value: 'x' }], remove_response_headers: ['server'] }, 'custom_response_headers[0].name'],
  ];
  const before = await policiesState(cp);
  for (const [body, field] of cases) {
    const res = await send(admin, 'POST', base, { name: 'bad', ...body });
    t.equal(res.status, 422, JSON.stringify(body));
    t.equal(res.body.code, 'INVALID_CONFIGURATION');
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `names ${field}: ${JSON.stringify(res.body.errors)}`);
  }
  const policy = await makePolicy({ cors: { allow_credentials: true, allow_origins: ['https://a.example.com'] } });
  const mid = await policiesState(cp);
  const res = await send(admin, 'PATCH', `${base}/${policy.id}`, { cors: { enabled: true, allow_origins: ['*'] } });
  t.equal(res.status, 422, 'checked on the merged policy');
  t.same(await policiesState(cp), mid, 'nothing stored');
  t.ok(before);
});

t.test('PATCH: partial (nested members merge), If-Match 412 with nothing changed, audit-logged with the changed fields', async (t) => {
  const policy = await makePolicy({ security_headers: { x_frame_options: { enabled: true } }, remove_response_headers: ['Server'] });
  const read = await send(viewer, 'GET', `${base}/${policy.id}`);
  t.equal(read.status, 200);
  const etag = read.headers.get('etag')!;
  const res = await send(admin, 'PATCH', `${base}/${policy.id}`, { security_headers: { x_frame_options: { value: 'SAMEORIGIN' } }, cors: { max_age_seconds: 60 } }, { 'if-match': etag });
  t.equal(res.status, 200, res.text);
  t.same(res.body.security_headers.x_frame_options, { enabled: true, value: 'SAMEORIGIN', override: true });
  t.equal(res.body.cors.max_age_seconds, 60);
  t.same(res.body.remove_response_headers, ['Server'], 'unsent fields kept');
  t.not(res.headers.get('etag'), etag);
  const before = await policiesState(cp);
  const stale = await send(admin, 'PATCH', `${base}/${policy.id}`, { name: 'late' }, { 'if-match': etag });
  t.equal(stale.status, 412);
  t.equal(stale.body.code, 'PRECONDITION_FAILED');
  t.same(await policiesState(cp), before, 'nothing changed');
  const bad = await send(admin, 'PATCH', `${base}/${policy.id}`, { custom_response_headers: [{ name: 'Upgrade', value: 'h2c' }] });
  t.equal(bad.status, 400);
  t.same(await policiesState(cp), before, 'nothing changed');
  const [audit] = await query<{ metadata: { changes: Record<string, unknown> } }>(cp,
    `select metadata from audit_log where action = 'response_headers_policy.updated' and resource_id = ?`, [policy.id]);
  t.same(Object.keys(audit!.metadata.changes).sort(), ['cors', 'security_headers']);
  t.equal((await send(viewer, 'GET', `${base}/${crypto.randomUUID()}`)).status, 404);
});

t.test('endpoints and routes may name only existing policies (422), and a referenced policy cannot be deleted (409)', async (t) => {
  const policy = await makePolicy();
  const { endpoint, origin } = await makeEndpoint(cp, admin);
  const missing = crypto.randomUUID();
  const before = await policiesState(cp);
  const badEndpoint = await send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { response_headers_policy_id: missing });
  t.equal(badEndpoint.status, 422);
  t.equal(badEndpoint.body.errors[0].field, 'response_headers_policy_id');
  const badRoute = await send(admin, 'POST', `/v1/cdn/distributions/${endpoint.id}/routes`, { name: 'r', origin_id: origin.id, match: { paths: ['/*'] }, response_headers_policy_id: missing });
  t.equal(badRoute.status, 422);
  t.same(await policiesState(cp), before, 'nothing stored');

  const onEndpoint = await send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { response_headers_policy_id: policy.id });
  t.equal(onEndpoint.status, 200, onEndpoint.text);
  const routePolicy = await makePolicy();
  const route = await send(admin, 'POST', `/v1/cdn/distributions/${endpoint.id}/routes`, { name: 'r', origin_id: origin.id, match: { paths: ['/*'] }, response_headers_policy_id: routePolicy.id });
  t.equal(route.status, 201, route.text);
  const other = await makeEndpoint(cp, admin, { response_headers_policy_id: policy.id });
  t.equal(other.endpoint.response_headers_policy_id, policy.id, 'an endpoint created with a policy');

  const mid = await policiesState(cp);
  for (const id of [policy.id, routePolicy.id]) {
    const del = await send(admin, 'DELETE', `${base}/${id}`);
    t.equal(del.status, 409);
    t.equal(del.body.code, 'RESOURCE_IN_USE');
  }
  t.match((await send(admin, 'DELETE', `${base}/${policy.id}`)).body.message, endpoint.id, 'names the endpoint');
  t.same(await policiesState(cp), mid, 'nothing removed');

  await send(admin, 'PATCH', `/v1/cdn/routes/${route.body.id}`, { response_headers_policy_id: null });
  t.equal((await send(admin, 'DELETE', `${base}/${routePolicy.id}`)).status, 204, 'free once the route lets go');
  t.equal((await send(viewer, 'GET', `${base}/${routePolicy.id}`)).status, 404);
  t.equal((await query(cp, `select 1 from audit_log where action = 'response_headers_policy.deleted' and resource_id = ?`, [routePolicy.id])).length, 1);
});

t.test('distribution-scoped: the list shows the policies the distribution uses; create makes the new policy the endpoint\'s own', async (t) => {
  const { endpoint, origin } = await makeEndpoint(cp, admin);
  const scoped = `/v1/cdn/distributions/${endpoint.id}/response-headers-policies`;
  t.same((await send(viewer, 'GET', scoped)).body.data, [], 'none yet');
  const created = await send(admin, 'POST', scoped, { name: 'Own', security_headers: { x_content_type_options: { enabled: true } } });
  t.equal(created.status, 201, created.text);
  const ep = await send(viewer, 'GET', `/v1/cdn/endpoints/${endpoint.id}`);
  t.equal(ep.body.response_headers_policy_id, created.body.id);
  t.equal(ep.body.status, 'deploying');
  const routePolicy = await makePolicy();
  await send(admin, 'POST', `/v1/cdn/distributions/${endpoint.id}/routes`, { name: 'r', origin_id: origin.id, match: { paths: ['/*'] }, response_headers_policy_id: routePolicy.id });
  await makePolicy();
  const list = await send(viewer, 'GET', scoped);
  t.same(list.body.data.map((p: { id: string }) => p.id), [created.body.id, routePolicy.id]);
  t.equal(list.body.meta.total, 2);
  const actions = await query<{ action: string }>(cp, `select action from audit_log where resource_id in (?, ?) order by created_at`, [created.body.id, endpoint.id]);
  t.ok(actions.some((a) => a.action === 'endpoint.updated'), 'the endpoint change is audit-logged');
  const missing = crypto.randomUUID();
  const before = await policiesState(cp);
  t.equal((await send(viewer, 'GET', `/v1/cdn/distributions/${missing}/response-headers-policies`)).status, 404);
  t.equal((await send(admin, 'POST', `/v1/cdn/distributions/${missing}/response-headers-policies`, { name: 'x' })).status, 404);
  t.equal((await send(admin, 'POST', scoped, { name: 'x', cors: { enabled: true, allow_credentials: true } })).status, 422);
  t.same(await policiesState(cp), before, 'nothing stored');
});

t.test('GET /v1/cdn/response-headers-policies pages, sorts and searches names and descriptions', async (t) => {
  const tag = `hp${process.pid}`;
  for (const name of ['Gamma', 'Alpha', 'Beta']) await makePolicy({ name: `${name} ${tag}`, description: name === 'Beta' ? 'for the zebra player' : '' });
  const sorted = await send(viewer, 'GET', `${base}?q=${tag}&sort=name&limit=2`);
  t.same(sorted.body.data.map((p: { name: string }) => p.name), [`Alpha ${tag}`, `Beta ${tag}`]);
  t.match(sorted.body.meta, { total: 3, has_more: true });
  const next = await send(viewer, 'GET', `${base}?q=${tag}&sort=name&limit=2&cursor=${encodeURIComponent(sorted.body.meta.next_cursor)}`);
  t.same(next.body.data.map((p: { name: string }) => p.name), [`Gamma ${tag}`]);
  t.same((await send(viewer, 'GET', `${base}?q=zebra`)).body.data.map((p: { name: string }) => p.name), [`Beta ${tag}`]);
  for (const bad of ['sort=cors', 'limit=0', `q=${'x'.repeat(201)}`, 'status=active']) t.equal((await send(viewer, 'GET', `${base}?${bad}`)).status, 400, bad);
});

t.test('roles: viewers and operators read but cannot write (403, nothing changes); subscribers and anonymous callers get nothing', async (t) => {
  const policy = await makePolicy();
  const { endpoint } = await makeEndpoint(cp, admin);
  const before = await policiesState(cp);
  for (const who of [viewer, operator]) {
    t.equal((await send(who, 'GET', base)).status, 200);
    t.equal((await send(who, 'GET', `${base}/${policy.id}`)).status, 200);
    t.equal((await send(who, 'GET', `/v1/cdn/distributions/${endpoint.id}/response-headers-policies`)).status, 200);
    t.equal((await send(who, 'POST', base, { name: 'x' })).status, 403);
    t.equal((await send(who, 'POST', `/v1/cdn/distributions/${endpoint.id}/response-headers-policies`, { name: 'x' })).status, 403);
    t.equal((await send(who, 'PATCH', `${base}/${policy.id}`, { name: 'y' })).status, 403);
    t.equal((await send(who, 'DELETE', `${base}/${policy.id}`)).status, 403);
  }
  t.equal((await send(subscriber, 'GET', base)).status, 403);
  t.equal((await send(null, 'GET', base)).status, 401);
  t.same(await policiesState(cp), before);
});

t.test('Idempotency-Key: a replay returns the first policy; another body under the same key is 422', async (t) => {
  const key = crypto.randomUUID();
  const body = { name: uniqueName('idem') };
  const first = await send(admin, 'POST', base, body, { 'idempotency-key': key });
  const again = await send(admin, 'POST', base, body, { 'idempotency-key': key });
  t.equal(again.status, 201);
  t.equal(again.body.id, first.body.id);
  t.equal((await query(cp, 'select 1 from cdn_response_headers_policy where name = ?', [body.name])).length, 1);
  const other = await send(admin, 'POST', base, { name: 'other' }, { 'idempotency-key': key });
  t.equal(other.status, 422);
  t.equal(other.body.code, 'IDEMPOTENCY_KEY_REUSED');
});

t.test('the policy, endpoint and route operations say in OpenAPI what the edge does with a policy, compression and error pages, and in what order', async (t) => {
  const doc = (await cp.request('GET', '/openapi.json')).body;
  for (const [path, method] of [[base, 'post'], [`${base}/{id}`, 'patch'], ['/v1/cdn/distributions/{id}/response-headers-policies', 'post']] as const) {
    const description: string = doc.paths[path][method].description;
    t.match(description, /1\. remove_response_headers are dropped; 2\. the enabled security headers/, `${method} ${path}: the order of the response edits`);
    t.match(description, /Preflights .* are answered by the edge and never forwarded/);
    t.match(description, /override true replaces the origin's field, false only fills a missing one/);
    t.match(description, /the cache key and Vary read the fields as forwarded/);
  }
  for (const [path, method] of [['/v1/cdn/endpoints', 'post'], ['/v1/cdn/endpoints/{id}', 'patch']] as const) {
    const description: string = doc.paths[path][method].description;
    t.match(description, /1\. custom_error_pages: .* 2\. compression .* 3\. the response headers policy/, `${method} ${path}: the order of the response steps`);
    t.match(description, /byte ranges are always served uncompressed/);
  }
  const route = doc.paths['/v1/cdn/routes'].post.requestBody.content['application/json'].schema.properties;
  t.match(route.compression_enabled.description, /overrides the endpoint's compression\.enabled/);
  t.match(route.response_headers_policy_id.description, /replacing the endpoint's \(not merged with it\)/);
});
