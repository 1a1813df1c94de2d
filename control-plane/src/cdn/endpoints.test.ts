// Endpoints and their distribution aliases through the real server (document 3
// §2, §3, §4.1; DESIGN.md §5): create with a CDN hostname and `deploying`,
// defaults, 422 for an invalid configuration, partial update with If-Match,
// disable/enable, delete with what belongs to it, lists, roles, API tokens.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers, cdnState, makeEndpoint, makeOrigin, uniqueName } from '../../../test/support/cdn.ts';
import { eventually } from '../../../test/support/eventually.ts';
import { besideTransaction } from '../db/transaction-guard.ts';

const cp = await startTestControlPlane(t, { env: { ...RELAXED_LIMITS, CDN_DOMAIN: 'edge.example.net' } });
const { admin, operator, viewer, subscriber } = await cdnCallers(cp);
const send = caller(cp);
// The shield regions are the regions of edge nodes willing to shield (issue 21 item 9, issue 23 item 5): two nodes have said so;
// a third node's region, where no node shields, is not one.
await query(cp, `insert into cdn_edge_node (id, hostname, region, status, agent_version, shield_address, created_at, updated_at)
  values (gen_random_uuid(), 'node-eu', 'eu-west', 'offline', 'test', 'http://10.0.0.1:8090', now(), now()),
    (gen_random_uuid(), 'node-us', 'us-east', 'offline', 'test', 'http://10.0.0.2:8090', now(), now()),
    (gen_random_uuid(), 'node-ap', 'ap-south', 'online', 'test', null, now(), now())`);

t.test('POST /v1/cdn/endpoints: 201 bare with Location and ETag, a CDN hostname, deploying, the documented defaults; the origin joins it', async (t) => {
  const origin = await makeOrigin(cp, admin);
  const res = await send(admin, 'POST', '/v1/cdn/endpoints', { name: 'Video', default_origin_id: origin.id });
  t.equal(res.status, 201, res.text);
  const e = res.body;
  t.equal(res.headers.get('location'), `/v1/cdn/endpoints/${e.id}`);
  t.ok(res.headers.get('etag'));
  t.match(e.hostname, /^[a-z][a-z2-7]{15}\.edge\.example\.net$/);
  t.match(e, {
    name: 'Video', default_origin_id: origin.id, status: 'deploying', http_version: 'http2', ipv6_enabled: true, response_headers_policy_id: null,
    tls_config: { minimum_protocol_version: 'TLSv1.2', cipher_policy: 'recommended', http_to_https_redirect: false },
    compression: { enabled: false, algorithms: ['br', 'gzip'], min_size_bytes: 1024 },
    geo_restriction: { enabled: false, policy: 'allowlist', countries: [], action: 'block' },
    custom_error_pages: [], shield_region: null, tags: [],
  });
  t.equal((await send(viewer, 'GET', `/v1/cdn/origins/${origin.id}`)).body.distribution_id, e.id);
  t.equal((await query(cp, `select 1 from audit_log where action = 'endpoint.created' and resource_id = ?`, [e.id])).length, 1);
});

t.test('regression: shield_region must be one of the shield regions (any string was accepted), on create and update; nothing stored on a refusal', async (t) => {
  const origin = await makeOrigin(cp, admin);
  const before = await cdnState(cp);
  const refused = await send(admin, 'POST', '/v1/cdn/endpoints', { name: uniqueName('shield'), default_origin_id: origin.id, shield_region: 'mars-north' });
  t.equal(refused.status, 422, refused.text);
  t.same(refused.body.errors, [{ field: 'shield_region', message: 'mars-north is not a shield region; the shield regions (GET /v1/cdn/shield-regions) are: eu-west, us-east' }]);
  t.same(await cdnState(cp), before, 'nothing stored');
  const unshielded = await send(admin, 'POST', '/v1/cdn/endpoints', { name: uniqueName('shield'), default_origin_id: origin.id, shield_region: 'ap-south' });
  t.equal(unshielded.status, 422, 'a region whose nodes do not shield is not a shield region');
  const { endpoint } = await makeEndpoint(cp, admin, { shield_region: 'us-east' });
  t.equal(endpoint.shield_region, 'us-east');
  const update = await send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { shield_region: 'atlantis' });
  t.equal(update.status, 422);
  t.equal(update.body.errors[0].field, 'shield_region');
  t.equal((await send(viewer, 'GET', `/v1/cdn/endpoints/${endpoint.id}`)).body.shield_region, 'us-east', 'unchanged');
  t.equal((await send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { shield_region: null })).status, 200, 'null is always accepted');
});

t.test('every optional field is stored as given', async (t) => {
  const origin = await makeOrigin(cp, admin);
  const body = {
    name: 'Full', default_origin_id: origin.id, http_version: 'http2and3', ipv6_enabled: false,
    tls_config: { minimum_protocol_version: 'TLSv1.3', cipher_policy: 'modern', http_to_https_redirect: true },
    compression: { enabled: true, algorithms: ['gzip'], min_size_bytes: 0 },
    geo_restriction: { enabled: true, policy: 'blocklist', countries: ['fr', 'DE'], action: 'block' },
    custom_error_pages: [{ error_code: 404, response_page_path: '/errors/404.html', response_code: 200, ttl_seconds: 60 }, { error_code: 503, response_page_path: '/503.html' }],
    shield_region: 'eu-west', tags: ['prod', 'video'],
  };
  const res = await send(admin, 'POST', '/v1/cdn/endpoints', body);
  t.equal(res.status, 201, res.text);
  t.match(res.body, { ...body, geo_restriction: { ...body.geo_restriction, countries: ['FR', 'DE'] } });
  t.same(res.body.custom_error_pages[1], { error_code: 503, response_page_path: '/503.html', response_code: null, ttl_seconds: 10 });
});

t.test('an invalid configuration is refused with 422 INVALID_CONFIGURATION naming the field, storing nothing', async (t) => {
  const disabled = await makeOrigin(cp, admin, { enabled: false });
  const { origin: taken } = await makeEndpoint(cp, admin);
  const free = await makeOrigin(cp, admin);
  const cases: [Record<string, unknown>, string][] = [
    [{ default_origin_id: crypto.randomUUID() }, 'default_origin_id'],
    [{ default_origin_id: disabled.id }, 'default_origin_id'],
    [{ default_origin_id: taken.id }, 'default_origin_id'],
    [{ default_origin_id: free.id, response_headers_policy_id: crypto.randomUUID() }, 'response_headers_policy_id'],
    [{ default_origin_id: free.id, geo_restriction: { enabled: true } }, 'geo_restriction.countries'],
    // Custom error pages the edge could not fetch (the edge's own rule, shared/src/config/response-policies.ts).
    [{ default_origin_id: free.id, custom_error_pages: [{ error_code: 404, response_page_path: '//evil.example/404.html' }] }, 'custom_error_pages[0].response_page_path'],
    [{ default_origin_id: free.id, custom_error_pages: [{ error_code: 404, response_page_path: '/errors%2F404.html' }] }, 'custom_error_pages[0].response_page_path'],
  ];
  const before = await cdnState(cp);
  for (const [body, field] of cases) {
    const res = await send(admin, 'POST', '/v1/cdn/endpoints', { name: 'bad', ...body });
    t.equal(res.status, 422, `${field} → 422`);
    t.equal(res.body.code, 'INVALID_CONFIGURATION');
    t.equal(res.body.errors?.[0]?.field, field, res.text);
  }
  t.same(await cdnState(cp), before, 'nothing stored');
});

t.test('bad input is refused with 400 naming the field, storing nothing', async (t) => {
  const origin = await makeOrigin(cp, admin);
  const ok = { name: 'n', default_origin_id: origin.id };
  const cases: [Record<string, unknown>, string][] = [
    [{ default_origin_id: origin.id }, 'name'],
    [{ name: 'n' }, 'default_origin_id'],
    [{ ...ok, name: 'x'.repeat(101) }, 'name'],
    [{ ...ok, default_origin_id: 'nope' }, 'default_origin_id'],
    [{ ...ok, http_version: 'http3' }, 'http_version'],
    [{ ...ok, ipv6_enabled: 'yes' }, 'ipv6_enabled'],
    [{ ...ok, tls_config: { minimum_protocol_version: 'SSLv3' } }, 'tls_config.minimum_protocol_version'],
    [{ ...ok, tls_config: { cipher_policy: 'weak' } }, 'tls_config.cipher_policy'],
    [{ ...ok, tls_config: { extra: true } }, 'tls_config.extra'],
    [{ ...ok, compression: { algorithms: ['zstd'] } }, 'compression.algorithms[0]'],
    [{ ...ok, compression: { algorithms: [] } }, 'compression.algorithms'],
    [{ ...ok, compression: { min_size_bytes: -1 } }, 'compression.min_size_bytes'],
    [{ ...ok, geo_restriction: { countries: ['XX'] } }, 'geo_restriction.countries[0]'],
    [{ ...ok, geo_restriction: { policy: 'denylist' } }, 'geo_restriction.policy'],
    [{ ...ok, geo_restriction: { action: 'redirect' } }, 'geo_restriction.action'],
    [{ ...ok, custom_error_pages: [{ error_code: 200, response_page_path: '/x' }] }, 'custom_error_pages[0].error_code'],
    [{ ...ok, custom_error_pages: [{ error_code: 404, response_page_path: 'x.html' }] }, 'custom_error_pages[0].response_page_path'],
    [{ ...ok, custom_error_pages: [{ error_code: 404, response_page_path: '/a' }, { error_code: 404, response_page_path: '/b' }] }, 'custom_error_pages'],
    [{ ...ok, shield_region: 'EU WEST' }, 'shield_region'],
    [{ ...ok, tags: 'prod' }, 'tags'],
    [{ ...ok, hostname: 'mine.example.com' }, 'hostname'],
    [{ ...ok, status: 'active' }, 'status'],
  ];
  const before = await cdnState(cp);
  for (const [body, field] of cases) {
    const res = await send(admin, 'POST', '/v1/cdn/endpoints', body);
    t.equal(res.status, 400, `${field} → 400`);
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `names ${field}: ${JSON.stringify(res.body.errors)}`);
  }
  t.same(await cdnState(cp), before, 'nothing stored');
});

t.test('the distribution aliases answer with the same records', async (t) => {
  const { endpoint } = await makeEndpoint(cp, admin, { tags: ['alias'] });
  const a = await send(viewer, 'GET', `/v1/cdn/endpoints/${endpoint.id}`);
  const b = await send(viewer, 'GET', `/v1/cdn/distributions/${endpoint.id}`);
  t.same(b.body, a.body);
  t.equal(b.headers.get('etag'), a.headers.get('etag'));
  const patched = await send(admin, 'PATCH', `/v1/cdn/distributions/${endpoint.id}`, { name: 'Renamed' }, { 'if-match': a.headers.get('etag')! });
  t.equal(patched.status, 200);
  t.equal((await send(viewer, 'GET', `/v1/cdn/endpoints/${endpoint.id}`)).body.name, 'Renamed');
  const listA = await send(viewer, 'GET', `/v1/cdn/endpoints?q=alias`);
  const listB = await send(viewer, 'GET', `/v1/cdn/distributions?q=alias`);
  t.same(listB.body, listA.body);
  const origin = await makeOrigin(cp, admin);
  const created = await send(admin, 'POST', '/v1/cdn/distributions', { name: 'Via alias', default_origin_id: origin.id });
  t.equal(created.status, 201);
  t.equal((await send(admin, 'DELETE', `/v1/cdn/distributions/${created.body.id}`)).status, 204);
  const doc = (await cp.request('GET', '/openapi.json')).body;
  for (const path of ['/v1/cdn/endpoints', '/v1/cdn/distributions', '/v1/cdn/endpoints/{id}', '/v1/cdn/distributions/{id}']) t.ok(doc.paths[path], `${path} in OpenAPI`);
});

t.test('PATCH: partial (nested objects merge), back to deploying, If-Match 412, 422 on a bad default origin, audit-logged', async (t) => {
  const { endpoint } = await makeEndpoint(cp, admin);
  await query(cp, `update cdn_endpoint set status = 'active' where id = ?`, [endpoint.id]);
  const read = await send(viewer, 'GET', `/v1/cdn/endpoints/${endpoint.id}`);
  const res = await send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { tls_config: { http_to_https_redirect: true }, shield_region: 'us-east' }, { 'if-match': read.headers.get('etag')! });
  t.equal(res.status, 200, res.text);
  t.same(res.body.tls_config, { minimum_protocol_version: 'TLSv1.2', cipher_policy: 'recommended', http_to_https_redirect: true });
  t.equal(res.body.status, 'deploying', 'a change has to reach the edge again');
  t.equal(res.body.name, endpoint.name);
  const before = await cdnState(cp);
  t.equal((await send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { name: 'x' }, { 'if-match': read.headers.get('etag')! })).status, 412);
  const other = await makeEndpoint(cp, admin);
  t.same((await send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { default_origin_id: other.origin.id })).body.errors?.[0]?.field, 'default_origin_id');
  t.equal((await send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { response_headers_policy_id: crypto.randomUUID() })).status, 422);
  const badPage = await send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { custom_error_pages: [{ error_code: 503, response_page_path: '//other.example/down.html' }] });
  t.equal(badPage.status, 422, 'an error page the edge could not fetch');
  t.equal(badPage.body.errors?.[0]?.field, 'custom_error_pages[0].response_page_path');
  t.equal((await send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { hostname: 'x.example.com' })).status, 400);
  t.same((await cdnState(cp)).endpoints.find((e: any) => e.id === endpoint.id), before.endpoints.find((e: any) => e.id === endpoint.id), 'unchanged');
  const moved = await makeOrigin(cp, admin);
  const switched = await send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { default_origin_id: moved.id, shield_region: null });
  t.equal(switched.status, 200);
  t.equal(switched.body.shield_region, null);
  t.equal((await send(viewer, 'GET', `/v1/cdn/origins/${moved.id}`)).body.distribution_id, endpoint.id, 'a free origin joins the endpoint');
  const audits = await query<{ metadata: any }>(cp, `select metadata from audit_log where action = 'endpoint.updated' and resource_id = ?`, [endpoint.id]);
  t.equal(audits.length, 2);
});

t.test('disable → disabled, enable → deploying; audit-logged; the record stays readable', async (t) => {
  const { endpoint } = await makeEndpoint(cp, admin);
  const off = await send(admin, 'POST', `/v1/cdn/endpoints/${endpoint.id}/disable`);
  t.equal(off.status, 200);
  t.equal(off.body.status, 'disabled');
  t.equal((await send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { name: 'Still off' })).body.status, 'disabled', 'an update keeps it disabled');
  t.equal((await send(admin, 'POST', `/v1/cdn/endpoints/${endpoint.id}/enable`)).body.status, 'deploying');
  const actions = await query<{ action: string }>(cp, `select action from audit_log where resource_id = ? order by created_at`, [endpoint.id]);
  t.same(actions.map((a) => a.action), ['endpoint.created', 'endpoint.disabled', 'endpoint.updated', 'endpoint.enabled']);
  t.equal((await send(admin, 'POST', `/v1/cdn/endpoints/${crypto.randomUUID()}/disable`)).status, 404);
});

t.test('DELETE removes the endpoint with its origins, routes and cache rules (204), audit-logged', async (t) => {
  const { endpoint, origin } = await makeEndpoint(cp, admin);
  const res = await send(admin, 'DELETE', `/v1/cdn/endpoints/${endpoint.id}`);
  t.equal(res.status, 204);
  t.equal((await send(viewer, 'GET', `/v1/cdn/endpoints/${endpoint.id}`)).status, 404);
  t.equal((await send(viewer, 'GET', `/v1/cdn/origins/${origin.id}`)).status, 404);
  t.equal((await query(cp, `select 1 from audit_log where action = 'endpoint.deleted' and resource_id = ?`, [endpoint.id])).length, 1);
  t.equal((await send(admin, 'DELETE', `/v1/cdn/endpoints/${endpoint.id}`)).status, 404);
});

t.test('GET /v1/cdn/endpoints pages, sorts, filters by status and searches names, hostnames and tags', async (t) => {
  const tag = `list${process.pid}`;
  const made: Record<string, any>[] = [];
  for (const name of ['Zulu', 'Yankee', 'Xray']) made.push((await makeEndpoint(cp, admin, { name: `${name} ${tag}`, tags: [tag] })).endpoint);
  await send(admin, 'POST', `/v1/cdn/endpoints/${made[0]!.id}/disable`);
  const page1 = await send(viewer, 'GET', `/v1/cdn/endpoints?q=${tag}&sort=name&limit=2`);
  t.same(page1.body.data.map((e: { name: string }) => e.name), [`Xray ${tag}`, `Yankee ${tag}`]);
  t.match(page1.body.meta, { total: 3, count: 2, has_more: true, prev_cursor: null });
  const page2 = await send(viewer, 'GET', `/v1/cdn/endpoints?q=${tag}&sort=name&limit=2&cursor=${page1.body.meta.next_cursor}`);
  t.same(page2.body.data.map((e: { name: string }) => e.name), [`Zulu ${tag}`]);
  t.equal((await send(viewer, 'GET', `/v1/cdn/endpoints?q=${tag}&status=disabled`)).body.data[0].id, made[0]!.id);
  t.equal((await send(viewer, 'GET', `/v1/cdn/endpoints?q=${made[1]!.hostname}`)).body.data[0]?.id, made[1]!.id, 'by hostname');
  t.equal((await send(viewer, 'GET', `/v1/cdn/endpoints?q=${made[2]!.hostname.split('.')[0]}`)).body.data[0]?.id, made[2]!.id, 'by its label');
  t.equal((await send(viewer, 'GET', `/v1/cdn/endpoints?sort=-created_at&limit=1`)).body.data.length, 1);
  for (const bad of ['status=live', 'sort=hostname', 'limit=0', 'cursor=garbage']) t.equal((await send(viewer, 'GET', `/v1/cdn/endpoints?${bad}`)).status, 400, bad);
});

t.test('roles: viewer and operator read only; admin writes; subscribers 403; anonymous 401; nothing changes on a refusal', async (t) => {
  const { endpoint } = await makeEndpoint(cp, admin);
  const origin = await makeOrigin(cp, admin);
  const before = await cdnState(cp);
  for (const who of [viewer, operator]) {
    t.equal((await send(who, 'GET', `/v1/cdn/endpoints/${endpoint.id}`)).status, 200);
    t.equal((await send(who, 'POST', '/v1/cdn/endpoints', { name: 'x', default_origin_id: origin.id })).status, 403);
    t.equal((await send(who, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { name: 'x' })).status, 403);
    t.equal((await send(who, 'POST', `/v1/cdn/endpoints/${endpoint.id}/disable`)).status, 403);
    t.equal((await send(who, 'DELETE', `/v1/cdn/distributions/${endpoint.id}`)).status, 403);
  }
  t.equal((await send(subscriber, 'GET', '/v1/cdn/endpoints')).status, 403);
  t.equal((await send(null, 'GET', '/v1/cdn/endpoints')).status, 401);
  t.same(await cdnState(cp), before);
});

t.test('API tokens (Bearer cdn_...) go through the same guard: a viewer token reads, an admin token writes', async (t) => {
  const issue = async (role: string) => {
    const res = await send(admin, 'POST', '/v1/cdn/api-tokens', { name: uniqueName(`${role} token`), role });
    t.equal(res.status, 201, res.text);
    return { authorization: `Bearer ${res.body.token as string}` };
  };
  const viewerToken = await issue('viewer');
  const adminToken = await issue('admin');
  const origin = await makeOrigin(cp, admin);
  t.equal((await cp.request('GET', '/v1/cdn/endpoints', { headers: viewerToken })).status, 200);
  t.equal((await cp.request('POST', '/v1/cdn/endpoints', { headers: viewerToken, json: { name: 'x', default_origin_id: origin.id } })).status, 403);
  const made = await cp.request('POST', '/v1/cdn/endpoints', { headers: adminToken, json: { name: uniqueName('by token'), default_origin_id: origin.id } });
  t.equal(made.status, 201, made.text);
  const [audit] = await query<{ actor_type: string }>(cp, `select actor_type from audit_log where action = 'endpoint.created' and resource_id = ?`, [made.body.id]);
  t.equal(audit?.actor_type, 'api_token');
});

t.test('Idempotency-Key on create: a replay returns the same endpoint and creates nothing more', async (t) => {
  const origin = await makeOrigin(cp, admin);
  const key = crypto.randomUUID();
  const body = { name: uniqueName('idem'), default_origin_id: origin.id };
  const first = await send(admin, 'POST', '/v1/cdn/endpoints', body, { 'idempotency-key': key });
  const again = await send(admin, 'POST', '/v1/cdn/endpoints', body, { 'idempotency-key': key });
  t.equal(again.status, 201);
  t.same(again.body, first.body);
  t.equal((await query(cp, 'select 1 from cdn_endpoint where name = ?', [body.name])).length, 1);
});

/**
 * Sends `request` while another transaction has run `statement` (the edge's deploying → active move: status
 * and version) on the endpoint's row and not committed; commits once the request's update waits for that row,
 * so the request read the version before the move and updates after it.
 */
async function racingTheEdge(endpointId: string, request: () => Promise<{ status: number; body: any; text: string }>) {
  const { answer } = await cp.database.db.orm.em.fork().transactional(async (em) => {
    await em.execute(`update cdn_endpoint set status = 'active', version = version + 1 where id = ?`, [endpointId]);
    const answer = request();
    // Deliberately beside the open transaction (on a connection of its own: PostgreSQL only).
    await besideTransaction(() => eventually(async () => (await query(cp, `select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query ilike 'update%cdn_endpoint%'`)).length > 0,
      'the request\'s update waits for the row'));
    return { answer };
  });
  return answer;
}

t.test('regression: a PATCH or disable without If-Match racing the edge\'s deploying → active move is applied, not 409', async (t) => {
  const { endpoint } = await makeEndpoint(cp, admin);
  const renamed = await racingTheEdge(endpoint.id, () => send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { name: 'Renamed while activating' }));
  t.equal(renamed.status, 200, renamed.text);
  t.match(renamed.body, { name: 'Renamed while activating', status: 'deploying' }, 'the change applies and has to reach the edge again');
  t.match((await send(viewer, 'GET', `/v1/cdn/endpoints/${endpoint.id}`)).body, { name: 'Renamed while activating', status: 'deploying' });

  const off = await racingTheEdge(endpoint.id, () => send(admin, 'POST', `/v1/cdn/endpoints/${endpoint.id}/disable`));
  t.equal(off.status, 200, off.text);
  t.equal((await send(viewer, 'GET', `/v1/cdn/endpoints/${endpoint.id}`)).body.status, 'disabled');

  const etag = (await send(viewer, 'GET', `/v1/cdn/endpoints/${endpoint.id}`)).headers.get('etag')!;
  const stale = await racingTheEdge(endpoint.id, () => send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { name: 'With If-Match' }, { 'if-match': etag }));
  t.equal(stale.status, 412, 'with If-Match the record changing under the request is a failed precondition');
  t.not((await send(viewer, 'GET', `/v1/cdn/endpoints/${endpoint.id}`)).body.name, 'With If-Match');
});
