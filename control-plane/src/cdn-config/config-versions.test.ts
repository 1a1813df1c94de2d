// Configuration versions through the real server with CDN_PUBLISH_MODE=manual
// (document 3 §3, §4.12; DESIGN.md §5): validate (valid and invalid drafts),
// publish (active, superseded, 422 with nothing changed, Idempotency-Key,
// roles), the compiled snapshot against the shared schema, content-addressed
// bodies, endpoint status back to deploying, rollback, list filters and
// paging, propagation_status from the FleetView, and no secret in any reply.
import t from 'tap';
import pg from 'pg';
import { assembleSnapshot } from '../../../shared/src/config/resources.ts';
import { parseConfigSnapshot } from '../../../shared/src/config/snapshot.ts';
import { query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers, makeEndpoint, makeOrigin, uniqueName } from '../../../test/support/cdn.ts';
import { makeLeaf, makeLeafOfKeyType, trustedTestCa } from '../../../test/support/certificates.ts';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { CONFIG_PUBLISHED_CHANNEL, type FleetView, type PropagationCounts } from './contracts.ts';
import { eventually } from '../../../test/support/eventually.ts';

const { ca, env: trustsCa } = await trustedTestCa('Config Test CA');
const cp = await startTestControlPlane(t, { env: { ...RELAXED_LIMITS, CDN_DOMAIN: 'edge.example.net', ...trustsCa } });
const { admin, operator, viewer } = await cdnCallers(cp);
const send = caller(cp);

// The channel's FleetView, faked: counts per version number.
const fleet = new Map<number, PropagationCounts>();
const fakeFleet: FleetView = { propagation: async (n) => fleet.get(n) ?? { total_nodes: 3, synced_nodes: 0, pending_nodes: 3, failed_nodes: 0 } };
cp.app.edgeFleet = fakeFleet;

const SIGNING_SECRET = 'S'.repeat(20) + 'igning-secret-value-0123456789';
const DRAIN_SECRET = 'drain-Secret-Access-Key-0123456789abcdef';
const leaf = await makeLeaf(ca, ['www.config-test.example']);

const versionRows = async () => ({
  versions: await query(cp, `select id, version_number, status, version from cdn_config_version order by version_number`),
  resources: (await query<{ n: number }>(cp, `select count(*)::int as n from cdn_config_resource`))[0]!.n,
  endpoints: await query(cp, `select * from cdn_endpoint order by id`),
  origins: await query(cp, `select * from cdn_origin order by id`),
  routes: await query(cp, `select * from cdn_route order by id`),
  audit: (await query<{ n: number }>(cp, `select count(*)::int as n from audit_log`))[0]!.n,
});
const expectOk = <R extends { status: number; text: string }>(res: R, status = 201): R => {
  if (res.status !== status) throw new Error(`expected ${status}, got ${res.status}: ${res.text}`);
  return res;
};

// A configuration with every kind of resource: two endpoints (one with a route, cache rule, signing key with token auth, IP rule,
// custom domain with a certificate), a response headers policy, a log drain with credentials.
const policy = expectOk(await send(admin, 'POST', '/v1/cdn/response-headers-policies', { name: uniqueName('policy'), custom_response_headers: [{ name: 'X-Served-By', value: 'edge' }] })).body;
const { endpoint, origin } = await makeEndpoint(cp, admin, { response_headers_policy_id: policy.id });
const { endpoint: other } = await makeEndpoint(cp, admin);
const extraOrigin = expectOk(await send(admin, 'POST', `/v1/cdn/distributions/${endpoint.id}/origins`, { name: uniqueName('extra'), host: '93.184.216.20' })).body;
const route = expectOk(await send(admin, 'POST', `/v1/cdn/distributions/${endpoint.id}/routes`, { name: 'videos', origin_id: extraOrigin.id, match: { paths: ['/videos/*'] } })).body;
expectOk(await send(admin, 'POST', `/v1/cdn/distributions/${endpoint.id}/cache-rules`, { name: 'images', match: { paths: ['/img/**'] }, ttl_seconds: 600 }));
const key = expectOk(await send(admin, 'POST', `/v1/cdn/endpoints/${endpoint.id}/signing-keys`, { name: 'main', secret: SIGNING_SECRET })).body;
expectOk(await send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { token_auth_enabled: true }), 200);
expectOk(await send(admin, 'POST', `/v1/cdn/endpoints/${endpoint.id}/ip-rules`, { action: 'block', cidr: '203.0.113.0/24' }));
expectOk(await send(admin, 'POST', `/v1/cdn/endpoints/${endpoint.id}/domains`, {
  hostname: 'www.config-test.example', certificate_source: 'custom', custom_certificate: { certificate_pem: leaf.certPem + ca.pem, private_key_pem: leaf.keyPem },
}));
const drain = expectOk(await send(admin, 'POST', '/v1/cdn/log-drains', {
  name: uniqueName('drain'), destination_type: 's3', destination_config: { bucket: 'logs', region: 'eu-west-1', access_key_id: 'AKIAEXAMPLE', secret_access_key: DRAIN_SECRET },
})).body;
const SECRETS = [SIGNING_SECRET, DRAIN_SECRET, leaf.keyPem.split('\n')[1]!];
const noSecrets = (t: { notOk(v: unknown, m: string): void }, text: string, what: string) => {
  for (const secret of SECRETS) t.notOk(text.includes(secret), `${what} holds no secret`);
};

t.test('manual mode: CDN writes create no version until POST publish', async (t) => {
  const list = await send(viewer, 'GET', '/v1/cdn/config/versions');
  t.equal(list.status, 200, list.text);
  t.same(list.body.data, []);
  t.equal((await cp.app.edgeConfig.active()), null);
});

let v1: any;
t.test('POST /v1/cdn/config/validate records a valid draft and publishes nothing', async (t) => {
  const res = await send(admin, 'POST', '/v1/cdn/config/validate', { description: 'check before release' });
  t.equal(res.status, 201, res.text);
  t.match(res.body, { status: 'valid', description: 'check before release', validation_errors: [], resource_count: 4, published_at: null, published_by: null });
  t.same(res.body.propagation_status, { total_nodes: 0, synced_nodes: 0, pending_nodes: 0, failed_nodes: 0, completed_at: null });
  t.equal(res.headers.get('location'), `/v1/cdn/config/versions/${res.body.id}`);
  t.equal(await cp.app.edgeConfig.active(), null, 'nothing published');
  t.equal((await query<{ n: number }>(cp, `select count(*)::int as n from cdn_config_resource`))[0]!.n, 0, 'a draft stores no bodies');
  noSecrets(t, res.text, 'the draft');
});

t.test('POST /v1/cdn/config/publish makes the working configuration the active version; its snapshot passes the shared schema', async (t) => {
  const res = await send(admin, 'POST', '/v1/cdn/config/publish', { description: 'first release' });
  t.equal(res.status, 201, res.text);
  v1 = res.body;
  t.match(v1, { status: 'active', description: 'first release', resource_count: 4, published_by: admin.id, validation_errors: [] });
  t.ok(v1.published_at);
  t.same(v1.propagation_status, { total_nodes: 3, synced_nodes: 0, pending_nodes: 3, failed_nodes: 0, completed_at: null }, 'live counts from the FleetView');
  noSecrets(t, res.text, 'the publish reply');

  const active = (await cp.app.edgeConfig.active())!;
  t.equal(active.version, v1.version_number);
  t.equal(active.digest, v1.digest);
  t.same([...active.manifest.keys()].sort(), [`endpoint/${endpoint.id}`, `endpoint/${other.id}`, `log_drain/${drain.id}`, `response_headers_policy/${policy.id}`].sort());
  const bodies = await cp.app.edgeConfig.bodies([...active.manifest.values()].map((e) => e.sha256));
  t.equal(bodies.size, 4);
  const snapshot = parseConfigSnapshot(assembleSnapshot(active.version, [...active.manifest].map(([k, e]) => [k, JSON.parse(Buffer.from(bodies.get(e.sha256)!).toString())])));
  const entry = snapshot.endpoints.find((e) => e.id === endpoint.id)!;
  t.equal(entry.hostname, endpoint.hostname);
  t.equal(entry.response_headers_policy_id, policy.id);
  t.same(entry.origins.map((o) => o.id).sort(), [origin.id, extraOrigin.id].sort());
  t.match(entry.routes, [{ id: route.id, origin_id: extraOrigin.id, match: { paths: ['/videos/*'] } }]);
  t.match(entry.cache_rules, [{ name: 'images', ttl_seconds: 600 }]);
  t.match(entry.signing_keys, [{ id: key.id, secrets: [{ secret: SIGNING_SECRET, valid_until: null }] }], 'signing secrets unsealed for the edge');
  t.match(entry.ip_rules, [{ action: 'block', cidr: '203.0.113.0/24' }]);
  t.match(entry.custom_domains, [{ hostname: 'www.config-test.example', private_key_pem: leaf.keyPem }]);
  t.same(snapshot.endpoints.find((e) => e.id === other.id)!.signing_keys, []);
  t.match(snapshot.log_drains, [{ id: drain.id, destination_config: { secret_access_key: DRAIN_SECRET, access_key_id: 'AKIAEXAMPLE' } }]);
  const stored = await query<{ body: Buffer }>(cp, `select body from cdn_config_resource`);
  t.ok(stored.every((r) => !SECRETS.some((s) => Buffer.from(r.body).toString().includes(s))), 'bodies are sealed at rest');
});

t.test('a one-endpoint change stores one new body; unchanged resources keep their version; a changed active endpoint goes back to deploying', async (t) => {
  await query(cp, `update cdn_endpoint set status = 'active'`);
  const before = (await query<{ n: number }>(cp, `select count(*)::int as n from cdn_config_resource`))[0]!.n;
  expectOk(await send(admin, 'PATCH', `/v1/cdn/endpoints/${other.id}`, { ipv6_enabled: false }), 200);
  await query(cp, `update cdn_endpoint set status = 'active'`);
  const res = expectOk(await send(admin, 'POST', '/v1/cdn/config/publish', { description: 'ipv6 off' }));
  t.equal((await query<{ n: number }>(cp, `select count(*)::int as n from cdn_config_resource`))[0]!.n, before + 1, 'one new body');
  const active = (await cp.app.edgeConfig.active())!;
  t.equal(active.manifest.get(`endpoint/${other.id}`)!.version, res.body.version_number);
  t.equal(active.manifest.get(`endpoint/${endpoint.id}`)!.version, v1.version_number, 'unchanged: the version it last changed in');
  const statuses = Object.fromEntries((await query<{ id: string; status: string }>(cp, `select id, status from cdn_endpoint`)).map((r) => [r.id, r.status]));
  t.equal(statuses[other.id], 'deploying');
  t.equal(statuses[endpoint.id], 'active');
  const first = await send(viewer, 'GET', `/v1/cdn/config/versions/${v1.id}`);
  t.equal(first.status, 200);
  t.equal(first.body.status, 'superseded');
  t.same(first.body.propagation_status, { total_nodes: 3, synced_nodes: 0, pending_nodes: 3, failed_nodes: 0, completed_at: null }, 'frozen when replaced');
  t.ok(first.headers.get('etag'));
  t.not(first.headers.get('etag'), null);
});

t.test('validate and publish of an invalid configuration: an invalid draft; 422 with validation_errors and nothing changed', async (t) => {
  // The API refuses these at write time; SQL makes them (as a job or an operator might).
  const disabled = expectOk(await send(admin, 'POST', `/v1/cdn/distributions/${other.id}/origins`, { name: uniqueName('spare'), host: '93.184.216.21' })).body;
  const bad = expectOk(await send(admin, 'POST', `/v1/cdn/distributions/${other.id}/routes`, { name: 'spare', origin_id: disabled.id, match: { paths: ['/spare/*'] } })).body;
  await query(cp, `update cdn_origin set enabled = false where id = ?`, [disabled.id]);
  await query(cp, `update cdn_endpoint set response_headers_policy_id = ? where id = ?`, [crypto.randomUUID(), other.id]);
  const draft = await send(admin, 'POST', '/v1/cdn/config/validate', {});
  t.equal(draft.status, 201, draft.text);
  t.equal(draft.body.status, 'invalid');
  t.match(draft.body.validation_errors, [{ resource_type: 'endpoint', resource_id: other.id, message: /Response headers policy .* does not exist/ }, { resource_type: 'route', resource_id: bad.id, message: /is disabled/ }]);
  const before = await versionRows();
  const res = await send(admin, 'POST', '/v1/cdn/config/publish', { description: 'should fail' });
  t.equal(res.status, 422, res.text);
  t.equal(res.body.code, 'INVALID_CONFIGURATION');
  t.same(res.body.validation_errors, draft.body.validation_errors);
  t.same(await versionRows(), before, 'nothing changed');
  // Put it right again.
  await query(cp, `update cdn_endpoint set response_headers_policy_id = null where id = ?`, [other.id]);
  expectOk(await send(admin, 'DELETE', `/v1/cdn/routes/${bad.id}`), 204);
  expectOk(await send(admin, 'DELETE', `/v1/cdn/origins/${disabled.id}`), 204);
});

t.test('roles: viewers read; viewers and operators cannot validate, publish or roll back; nothing stored', async (t) => {
  const before = await versionRows();
  for (const who of [viewer, operator]) {
    t.equal((await send(who, 'POST', '/v1/cdn/config/publish', {})).status, 403);
    t.equal((await send(who, 'POST', '/v1/cdn/config/validate', {})).status, 403);
    t.equal((await send(who, 'POST', '/v1/cdn/config/rollback', { target_version_id: v1.id })).status, 403);
  }
  t.equal((await send(null, 'POST', '/v1/cdn/config/publish', {})).status, 401);
  t.equal((await send(operator, 'GET', '/v1/cdn/config/versions')).status, 200);
  t.same(await versionRows(), before);
});

t.test('a publish is announced on the store\'s channel with its version number; drafts and refusals are not', async (t) => {
  const messages: string[] = [];
  const unsubscribe = await cp.app.store.subscribe(CONFIG_PUBLISHED_CHANNEL, (m) => messages.push(m));
  t.teardown(unsubscribe);
  t.equal((await send(admin, 'POST', '/v1/cdn/config/validate', {})).status, 201);
  t.equal((await send(admin, 'POST', '/v1/cdn/config/publish', { description: 'x'.repeat(501) })).status, 400);
  const res = expectOk(await send(admin, 'POST', '/v1/cdn/config/publish', { description: 'announced' }));
  await eventually(() => messages.length > 0, 'the announcement arrives');
  t.same(messages.map((m) => JSON.parse(m)), [{ version: res.body.version_number }], 'the publish alone, in channel order');
});

t.test('Idempotency-Key: a replayed publish returns the original version; the key with another body 422', async (t) => {
  const headers = { 'idempotency-key': crypto.randomUUID() };
  const first = expectOk(await send(admin, 'POST', '/v1/cdn/config/publish', { description: 'once' }, headers));
  const count = (await query(cp, `select id from cdn_config_version`)).length;
  const again = await send(admin, 'POST', '/v1/cdn/config/publish', { description: 'once' }, headers);
  t.equal(again.status, 201);
  t.equal(again.body.id, first.body.id);
  t.equal((await query(cp, `select id from cdn_config_version`)).length, count, 'no second version');
  t.equal((await send(admin, 'POST', '/v1/cdn/config/publish', { description: 'other' }, headers)).status, 422);
});

t.test('bad input: 400 naming the field, nothing stored', async (t) => {
  const before = await versionRows();
  const cases: [string, unknown, string][] = [
    ['/v1/cdn/config/publish', { description: 'x'.repeat(501) }, 'description'],
    ['/v1/cdn/config/publish', { description: 'a', extra: 1 }, 'extra'],
    ['/v1/cdn/config/validate', { description: 5 }, 'description'],
    ['/v1/cdn/config/rollback', {}, 'target_version_id'],
    ['/v1/cdn/config/rollback', { target_version_id: 'nope' }, 'target_version_id'],
    ['/v1/cdn/config/rollback', { target_version_id: v1.id, reason: 'r'.repeat(501) }, 'reason'],
  ];
  for (const [path, body, field] of cases) {
    const res = await send(admin, 'POST', path, body);
    t.equal(res.status, 400, `${path} ${JSON.stringify(body).slice(0, 60)}`);
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `names ${field}: ${JSON.stringify(res.body.errors)}`);
  }
  t.equal((await send(viewer, 'GET', '/v1/cdn/config/versions?status=bogus')).status, 400);
  t.equal((await send(viewer, 'GET', '/v1/cdn/config/versions?cursor=garbage')).status, 400);
  t.equal((await send(viewer, 'GET', '/v1/cdn/config/versions/not-a-uuid')).status, 400);
  t.equal((await send(viewer, 'GET', `/v1/cdn/config/versions/${crypto.randomUUID()}`)).status, 404);
  t.same(await versionRows(), before);
});

t.test('POST /v1/cdn/config/rollback restores the working configuration and publishes it; refused targets change nothing', async (t) => {
  // Release 1: the configuration as it is now.
  const target = expectOk(await send(admin, 'POST', '/v1/cdn/config/publish', { description: 'known good' })).body;
  const endpointBefore = (await query(cp, `select name, http_version, compression from cdn_endpoint where id = ?`, [endpoint.id]))[0];
  // Then: a route and its origin deleted, the endpoint edited, published.
  expectOk(await send(admin, 'DELETE', `/v1/cdn/routes/${route.id}`), 204);
  expectOk(await send(admin, 'DELETE', `/v1/cdn/origins/${extraOrigin.id}`), 204);
  expectOk(await send(admin, 'PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { name: 'renamed', http_version: 'http1.1' }), 200);
  const bad = expectOk(await send(admin, 'POST', '/v1/cdn/config/publish', { description: 'bad release' })).body;

  const before = await versionRows();
  for (const [id, status] of [[bad.id, 409], [crypto.randomUUID(), 404]] as const) {
    const res = await send(admin, 'POST', '/v1/cdn/config/rollback', { target_version_id: id });
    t.equal(res.status, status, res.text);
  }
  const draft = (await query<{ id: string }>(cp, `select id from cdn_config_version where status = 'valid' limit 1`))[0]!;
  t.equal((await send(admin, 'POST', '/v1/cdn/config/rollback', { target_version_id: draft.id })).status, 409, 'a draft is no target');
  t.same(await versionRows(), before, 'refusals change nothing');

  const res = await send(admin, 'POST', '/v1/cdn/config/rollback', { target_version_id: target.id, reason: 'videos broke' }, { 'idempotency-key': crypto.randomUUID() });
  t.equal(res.status, 201, res.text);
  t.match(res.body, { status: 'active', rollback_target_id: target.id, description: /Rollback to version \d+: videos broke/ });
  t.ok(res.body.version_number > bad.version_number);
  t.equal((await send(viewer, 'GET', `/v1/cdn/config/versions/${bad.id}`)).body.status, 'rolled_back');
  t.equal((await send(viewer, 'GET', `/v1/cdn/config/versions/${target.id}`)).body.status, 'superseded');
  t.same((await query(cp, `select id, origin_id from cdn_route where id = ?`, [route.id])), [{ id: route.id, origin_id: extraOrigin.id }], 'the route is back, same id');
  t.same((await query(cp, `select id, distribution_id from cdn_origin where id = ?`, [extraOrigin.id])), [{ id: extraOrigin.id, distribution_id: endpoint.id }]);
  t.same((await query(cp, `select name, http_version, compression from cdn_endpoint where id = ?`, [endpoint.id]))[0], endpointBefore, 'the edit is undone');
  const active = (await cp.app.edgeConfig.active())!;
  const targetVersion = (await cp.app.edgeConfig.version(target.version_number))!;
  t.equal(active.digest, targetVersion.digest, 'the published configuration is the target\'s');
  const audit = await query<{ actor_id: string; metadata: any }>(cp, `select actor_id, metadata from audit_log where action = 'config.rolled_back' and resource_id = ?`, [res.body.id]);
  t.equal(audit.length, 1);
  t.equal(audit[0]!.actor_id, admin.id);
  t.match(audit[0]!.metadata, { reason: 'videos broke', target_version_id: target.id, target_version_number: target.version_number });
  // The signing secret and drain credentials still work after the restore (re-sealed or kept).
  const bodies = await cp.app.edgeConfig.bodies([active.manifest.get(`endpoint/${endpoint.id}`)!.sha256]);
  t.match(JSON.parse(Buffer.from([...bodies.values()][0]!).toString()).signing_keys, [{ secrets: [{ secret: SIGNING_SECRET }] }]);
  noSecrets(t, res.text, 'the rollback reply');
});

t.test('rollback also restores policies, drains (with their credentials), signing secrets, IP rules and a deleted custom domain', async (t) => {
  const target = expectOk(await send(admin, 'POST', '/v1/cdn/config/publish', { description: 'before the policy changes' })).body;
  const [rule] = await query<{ id: string }>(cp, `select id from cdn_ip_rule where endpoint_id = ?`, [endpoint.id]);
  const [domain] = await query<{ id: string }>(cp, `select id from cdn_custom_domain where endpoint_id = ?`, [endpoint.id]);
  const policyBefore = (await query(cp, `select name, custom_response_headers from cdn_response_headers_policy where id = ?`, [policy.id]))[0];
  expectOk(await send(admin, 'DELETE', `/v1/cdn/endpoints/${endpoint.id}/ip-rules/${rule!.id}`), 204);
  expectOk(await send(admin, 'POST', `/v1/cdn/endpoints/${endpoint.id}/ip-rules`, { action: 'allow', cidr: '198.51.100.0/24' }));
  expectOk(await send(admin, 'POST', `/v1/cdn/endpoints/${endpoint.id}/signing-keys/${key.id}/rotate`, { grace_period_hours: 0 }), 200);
  expectOk(await send(admin, 'DELETE', `/v1/cdn/log-drains/${drain.id}`), 204);
  expectOk(await send(admin, 'PATCH', `/v1/cdn/response-headers-policies/${policy.id}`, { name: 'changed', custom_response_headers: [] }), 200);
  expectOk(await send(admin, 'DELETE', `/v1/cdn/endpoints/${endpoint.id}/domains/${domain!.id}`), 204);
  expectOk(await send(admin, 'POST', '/v1/cdn/config/publish', { description: 'policy changes' }));

  const res = await send(admin, 'POST', '/v1/cdn/config/rollback', { target_version_id: target.id });
  t.equal(res.status, 201, res.text);
  t.same(await query(cp, `select id, action, cidr from cdn_ip_rule where endpoint_id = ?`, [endpoint.id]), [{ id: rule!.id, action: 'block', cidr: '203.0.113.0/24' }]);
  t.same((await query(cp, `select name, custom_response_headers from cdn_response_headers_policy where id = ?`, [policy.id]))[0], policyBefore);
  const restoredDrain = await send(admin, 'GET', `/v1/cdn/log-drains/${drain.id}`);
  t.equal(restoredDrain.status, 200, 'the drain is back with its id');
  t.equal(restoredDrain.body.destination_config.secret_access_key, '***', 'its credentials masked in replies');
  t.match(await query(cp, `select hostname, certificate_source, certificate_status from cdn_custom_domain where endpoint_id = ?`, [endpoint.id]),
    [{ hostname: 'www.config-test.example', certificate_source: 'custom', certificate_status: 'active' }], 'the domain is re-created with its certificate');
  const active = (await cp.app.edgeConfig.active())!;
  t.equal(active.digest, (await cp.app.edgeConfig.version(target.version_number))!.digest, 'the edge sees exactly the target again');
  const drainBody = (await cp.app.edgeConfig.bodies([active.manifest.get(`log_drain/${drain.id}`)!.sha256])).values().next().value!;
  t.equal(JSON.parse(Buffer.from(drainBody).toString()).destination_config.secret_access_key, DRAIN_SECRET);
  noSecrets(t, res.text, 'the rollback reply');
});

t.test('regression: a rollback keeps the claims still waiting for validation (unpublished, they are not configuration); a domain it restores takes the name over from other endpoints\' unvalidated claims', async (t) => {
  const target = expectOk(await send(admin, 'POST', '/v1/cdn/config/publish', { description: 'before the claims' })).body;
  const [www] = await query<{ id: string }>(cp, `select id from cdn_custom_domain where endpoint_id = ? and hostname = 'www.config-test.example'`, [endpoint.id]);
  expectOk(await send(admin, 'DELETE', `/v1/cdn/endpoints/${endpoint.id}/domains/${www!.id}`), 204);
  const waiting = expectOk(await send(admin, 'POST', `/v1/cdn/endpoints/${endpoint.id}/domains`, { hostname: 'waiting.config-test.example', certificate_source: 'managed' })).body;
  const contending = expectOk(await send(admin, 'POST', `/v1/cdn/endpoints/${other.id}/domains`, { hostname: 'www.config-test.example', certificate_source: 'managed' })).body;
  expectOk(await send(admin, 'POST', '/v1/cdn/config/publish', { description: 'www gone, two claims waiting' }));
  const active = (await cp.app.edgeConfig.active())!;
  const endpointBody = JSON.parse(Buffer.from((await cp.app.edgeConfig.bodies([active.manifest.get(`endpoint/${endpoint.id}`)!.sha256])).values().next().value!).toString());
  t.same(endpointBody.custom_domains, [], 'a claim waiting for validation is not in the published version');

  expectOk(await send(admin, 'POST', '/v1/cdn/config/rollback', { target_version_id: target.id }));
  t.match(await query(cp, `select certificate_status from cdn_custom_domain where id = ?`, [waiting.id]), [{ certificate_status: 'pending_validation' }], 'the waiting claim is kept');
  t.match(await query(cp, `select endpoint_id, certificate_source, certificate_status from cdn_custom_domain where hostname = 'www.config-test.example' and certificate_pem is not null`),
    [{ endpoint_id: endpoint.id, certificate_source: 'custom', certificate_status: 'active' }], 'www is restored, validated, on its endpoint');
  t.match(await query(cp, `select certificate_status, validation_error from cdn_custom_domain where id = ?`, [contending.id]),
    [{ certificate_status: 'failed', validation_error: /^Taken over: www\.config-test\.example/ }], 'the other endpoint\'s claim is taken over');
  expectOk(await send(admin, 'DELETE', `/v1/cdn/endpoints/${endpoint.id}/domains/${waiting.id}`), 204);
  expectOk(await send(admin, 'DELETE', `/v1/cdn/endpoints/${other.id}/domains/${contending.id}`), 204);
});

t.test('a publish caught in a deadlock with the channel\'s bookkeeping is run again and succeeds', async (t) => {
  // The channel's pattern: mark the active version complete, then move endpoints to active, in one transaction.
  const channel = new pg.Client({ connectionString: cp.database.url });
  await channel.connect();
  t.teardown(() => channel.end());
  await channel.query('begin');
  await channel.query(`update cdn_config_version set propagation_completed_at = now() where status = 'active'`);
  const publishing = send(admin, 'POST', '/v1/cdn/config/publish', { description: 'through a deadlock' });
  await eventually(async () => (await query<{ n: number }>(cp,
    `select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and query like 'update cdn_config_version set status%'`))[0]!.n > 0,
  'the publisher waits for the version row');
  const channelDone = channel.query(`update cdn_endpoint set status = 'active' where status = 'deploying'`).then(() => channel.query('commit'), async (error) => {
    await channel.query('rollback');
    return error;
  });
  const res = await publishing;
  await channelDone;
  t.equal(res.status, 201, res.text);
  t.equal(res.body.status, 'active');
  t.equal((await query<{ n: number }>(cp, `select count(*)::int as n from cdn_config_version where status = 'active'`))[0]!.n, 1);
});

t.test('GET /v1/cdn/config/versions: newest first, status filter, paging; no secret in any reply', async (t) => {
  const all = await send(viewer, 'GET', '/v1/cdn/config/versions?limit=100');
  t.equal(all.status, 200);
  const numbers = all.body.data.map((v: any) => v.version_number);
  t.same(numbers, [...numbers].sort((a: number, b: number) => b - a), 'newest first');
  t.equal(all.body.data.filter((v: any) => v.status === 'active').length, 1, 'one active version');
  noSecrets(t, all.text, 'the list');
  const superseded = await send(viewer, 'GET', '/v1/cdn/config/versions?status=superseded');
  t.ok(superseded.body.data.length >= 2);
  t.ok(superseded.body.data.every((v: any) => v.status === 'superseded'));
  const page1 = await send(viewer, 'GET', '/v1/cdn/config/versions?limit=2');
  t.equal(page1.body.data.length, 2);
  t.equal(page1.body.meta.total, all.body.data.length);
  const page2 = await send(viewer, 'GET', `/v1/cdn/config/versions?limit=2&cursor=${page1.body.meta.next_cursor}`);
  t.same(page2.body.data.map((v: any) => v.version_number), numbers.slice(2, 4));
  const read = await send(viewer, 'GET', `/v1/cdn/config/versions/${all.body.data[0].id}`);
  t.same(read.body, all.body.data[0]);
  noSecrets(t, read.text, 'a read');
  fleet.set(read.body.version_number, { total_nodes: 2, synced_nodes: 1, pending_nodes: 0, failed_nodes: 1 });
  t.match((await send(viewer, 'GET', `/v1/cdn/config/versions/${read.body.id}`)).body.propagation_status, { total_nodes: 2, synced_nodes: 1, failed_nodes: 1 });
});

t.test('GET /v1/cdn/origins and the audit log show no secret either', async (t) => {
  const free = await makeOrigin(cp, admin);
  t.ok(free.id);
  const audit = await query<{ metadata: unknown }>(cp, `select metadata from audit_log where action like 'config.%'`);
  noSecrets(t, JSON.stringify(audit), 'the configuration audit entries');
});

t.test('regression: a rollback does not bring back a certificate the edge cannot serve; the domain returns waiting for a managed one, saying why', async (t) => {
  const hostname = 'legacy.config-test.example';
  const good = await makeLeaf(ca, [hostname]);
  const domain = expectOk(await send(admin, 'POST', `/v1/cdn/endpoints/${endpoint.id}/domains`, {
    hostname, certificate_source: 'custom', custom_certificate: { certificate_pem: good.certPem + ca.pem, private_key_pem: good.keyPem },
  })).body;
  // Stored before the write-time check refused such pairs: a secp256k1 certificate.
  const k1 = await makeLeafOfKeyType(ca, [hostname], 'secp256k1');
  await query(cp, `update cdn_custom_domain set certificate_pem = ?, private_key_sealed = ? where id = ?`,
    [k1.certPem + ca.pem, cp.app.secretBox.seal(k1.keyPem, `cdn_custom_domain:${domain.id}`), domain.id]);
  const target = expectOk(await send(admin, 'POST', '/v1/cdn/config/publish', { description: 'with the legacy pair' })).body;
  expectOk(await send(admin, 'DELETE', `/v1/cdn/endpoints/${endpoint.id}/domains/${domain.id}`), 204);
  expectOk(await send(admin, 'POST', '/v1/cdn/config/publish', { description: 'legacy gone' }));

  expectOk(await send(admin, 'POST', '/v1/cdn/config/rollback', { target_version_id: target.id }));
  t.match(await query(cp, `select certificate_source, certificate_status, certificate_pem, private_key_sealed, validation_error from cdn_custom_domain where hostname = ?`, [hostname]), [{
    certificate_source: 'managed', certificate_status: 'pending_validation', certificate_pem: null, private_key_sealed: null,
    validation_error: /^Re-created by a configuration rollback without its certificate \(The edge cannot serve this certificate: an ECDSA key on secp256k1 is not served/,
  }]);
  const active = (await cp.app.edgeConfig.active())!;
  const endpointBody = JSON.parse(Buffer.from((await cp.app.edgeConfig.bodies([active.manifest.get(`endpoint/${endpoint.id}`)!.sha256])).values().next().value!).toString());
  t.notOk(endpointBody.custom_domains.some((d: { hostname: string }) => d.hostname === hostname), 'the published rollback does not carry it');
});
