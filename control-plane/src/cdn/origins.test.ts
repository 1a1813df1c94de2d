// Origins through the real server (document 3 §2, §4.2): create (top level and
// per distribution), defaults, the SSRF check in every address spelling,
// masked custom headers, partial update with If-Match, enable/disable and
// delete refusals, health, paging, sort and q, roles.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers, cdnState, makeEndpoint, makeOrigin, uniqueName } from '../../../test/support/cdn.ts';
import type { CdnServices } from './services.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const { admin, operator, viewer, subscriber } = await cdnCallers(cp);
const send = caller(cp);
// DNS answers for test names, so no test depends on the network.
const dnsAnswers: Record<string, string[]> = {
  'public.test': ['93.184.216.7'],
  'private.test': ['10.1.2.3'],
  'mixed.test': ['93.184.216.8', '192.168.0.5'],
  'metadata.test': ['169.254.169.254'],
  'v6private.test': ['fd12::1'],
  'compatible.test': ['::7f00:1'],
};
(cp.app as unknown as CdnServices).cdnHostLookup = async (host) => dnsAnswers[host] ?? [];

t.test('POST /v1/cdn/origins creates an origin with the documented defaults: 201 bare, Location, ETag, audit-logged', async (t) => {
  const res = await send(admin, 'POST', '/v1/cdn/origins', { name: 'Media', host: 'Media.Example.COM.' });
  t.equal(res.status, 201, res.text);
  const o = res.body;
  t.equal(res.headers.get('location'), `/v1/cdn/origins/${o.id}`);
  t.ok(res.headers.get('etag'));
  t.notOk(o.data, 'a bare record');
  t.match(o, {
    distribution_id: null, name: 'Media', scheme: 'https', host: 'media.example.com', port: 443, path_prefix: '', protocol: 'https', enabled: true,
    health_status: 'unknown', health_check_url: null, health_check_interval_seconds: 30, verify_tls: true, allow_private_network: false, ssrf_protection: true,
    timeout_ms: 30000, connect_timeout_ms: 5000, max_retries: 2, retry_on: ['connect_failure', '5xx'], forward_host_header: true, custom_headers: {}, tags: [],
    url: 'https://media.example.com:443',
  });
  const [audit] = await query<{ actor_id: string }>(cp, `select actor_id from audit_log where action = 'origin.created' and resource_id = ?`, [o.id]);
  t.equal(audit?.actor_id, admin.id);
});

t.test('url is a convenience form of scheme, host, port and path_prefix', async (t) => {
  const res = await send(admin, 'POST', '/v1/cdn/origins', { name: 'By url', url: 'http://93.184.216.9:8080/media/v1' });
  t.equal(res.status, 201, res.text);
  t.match(res.body, { scheme: 'http', host: '93.184.216.9', port: 8080, path_prefix: '/media/v1', url: 'http://93.184.216.9:8080/media/v1' });
  const plain = await send(admin, 'POST', '/v1/cdn/origins', { name: 'Plain http', scheme: 'http', host: '93.184.216.9' });
  t.equal(plain.body.port, 80, 'http defaults to port 80');
});

t.test('custom header values are masked in create, read, list, update and the audit trail, and "***" keeps a stored value', async (t) => {
  const o = await makeOrigin(cp, admin, { custom_headers: { 'X-Origin-Secret': 's3cr3t-value', 'X-Plain': 'visible?' } });
  t.same(o.custom_headers, { 'X-Origin-Secret': '***', 'X-Plain': '***' });
  const read = await send(viewer, 'GET', `/v1/cdn/origins/${o.id}`);
  t.same(read.body.custom_headers, { 'X-Origin-Secret': '***', 'X-Plain': '***' });
  const list = await send(viewer, 'GET', `/v1/cdn/origins?q=${encodeURIComponent(o.name)}`);
  t.notMatch(list.text, /s3cr3t/);
  const patched = await send(admin, 'PATCH', `/v1/cdn/origins/${o.id}`, { custom_headers: { 'X-Origin-Secret': '***', 'X-New': 'another-secret' } });
  t.equal(patched.status, 200, patched.text);
  const [row] = await query<{ custom_headers: Record<string, string> }>(cp, 'select custom_headers from cdn_origin where id = ?', [o.id]);
  t.same(row!.custom_headers, { 'X-Origin-Secret': 's3cr3t-value', 'X-New': 'another-secret' }, 'kept and replaced as asked');
  const audit = await query<{ metadata: unknown }>(cp, `select metadata from audit_log where resource_id = ?`, [o.id]);
  t.notMatch(JSON.stringify(audit), /s3cr3t|another-secret|visible/, 'no value in the audit trail');
  const unknown = await send(admin, 'PATCH', `/v1/cdn/origins/${o.id}`, { custom_headers: { 'X-Missing': '***' } });
  t.equal(unknown.status, 400);
});

t.test('the SSRF check refuses private, loopback, link-local, CGNAT and metadata hosts in every spelling with 422, storing nothing', async (t) => {
  const refused: [string, string][] = [
    ['127.0.0.1', 'private'], ['2130706433', 'private'], ['0177.0.0.1', 'private'], ['0x7f.1', 'private'], ['127.1', 'private'], ['0x7f000001', 'private'],
    ['::1', 'private'], ['[::1]', 'private'], ['::ffff:127.0.0.1', 'private'], ['10.0.0.1', 'private'], ['172.16.5.4', 'private'], ['192.168.1.1', 'private'],
    ['100.64.0.1', 'private'], ['fd00::1', 'private'], ['localhost', 'private'], ['api.localhost', 'private'], ['private.test', 'private'],
    ['mixed.test', 'private'], ['v6private.test', 'private'],
    ['169.254.169.254', 'special'], ['0xa9fea9fe', 'special'], ['fe80::1', 'special'], ['64:ff9b::a00:1', 'special'], ['100.100.100.200', 'special'],
    ['0.0.0.0', 'special'], ['224.0.0.1', 'special'], ['metadata.test', 'special'], ['::ffff:169.254.169.254', 'special'],
    ...EMBEDDED_IPV4,
  ];
  const before = await cdnState(cp);
  for (const [host] of refused) {
    const res = await send(admin, 'POST', '/v1/cdn/origins', { name: 'ssrf', host });
    t.equal(res.status, 422, `${host} → 422`);
    t.equal(res.body.code, 'INVALID_CONFIGURATION');
    t.equal(res.body.errors?.[0]?.field, 'host', host);
  }
  t.equal((await send(admin, 'POST', '/v1/cdn/origins', { name: 'ssrf', url: 'http://0x7f.1:8080/' })).status, 422, 'through url too');
  t.same(await cdnState(cp), before, 'nothing stored, nothing audited');

  // allow_private_network opens private-use addresses only; special ones also need ssrf_protection false.
  for (const [host, kind] of refused) {
    const res = await send(admin, 'POST', '/v1/cdn/origins', { name: 'lab', host, allow_private_network: true });
    t.equal(res.status, kind === 'private' ? 201 : 422, `${host} with allow_private_network`);
    const open = await send(admin, 'POST', '/v1/cdn/origins', { name: 'lab', host, allow_private_network: true, ssrf_protection: false });
    t.equal(open.status, 201, `${host} with allow_private_network and ssrf_protection false`);
  }
  const stored = await send(admin, 'POST', '/v1/cdn/origins', { name: 'lab', host: '0177.0.0.1', allow_private_network: true });
  t.equal(stored.body.host, '127.0.0.1', 'stored in the canonical form the edge dials');
  const ssrfOff = await send(admin, 'POST', '/v1/cdn/origins', { name: 'x', host: '127.0.0.1', ssrf_protection: false });
  t.equal(ssrfOff.status, 422, 'ssrf_protection false alone opens nothing');
});

// Every IPv6 form that embeds an IPv4 address (the IPv4-mapped one is judged as that address, above), refused as the edge refuses to dial it.
const EMBEDDED_IPV4: [string, string][] = [
  ['::7f00:1', 'special'], ['[::7f00:1]', 'special'], ['::a00:1', 'special'], ['::808:808', 'special'], ['compatible.test', 'special'],
  ['::ffff:0:7f00:1', 'special'], ['64:ff9b::7f00:1', 'special'], ['64:ff9b:1::a00:1', 'special'], ['2002:7f00:1::1', 'special'],
  ['2001:0:4136:e378:8000:63bf:80ff:fffe', 'special'],
];

t.test('regression: IPv4-compatible IPv6 (http://[::127.0.0.1] → ::7f00:1) was accepted; every embedded-IPv4 form is refused with 422', async (t) => {
  const before = await cdnState(cp);
  for (const url of ['http://[::127.0.0.1]:8080/', 'http://[::7f00:1]/', 'https://[::10.0.0.1]/', 'http://[64:ff9b::127.0.0.1]/', 'http://[2002:7f00:1::1]/']) {
    for (const flags of [{}, { allow_private_network: true }]) {
      const res = await send(admin, 'POST', '/v1/cdn/origins', { name: 'embedded', url, ...flags });
      t.equal(res.status, 422, `${url} ${JSON.stringify(flags)}`);
      t.equal(res.body.errors?.[0]?.field, 'url', url);
    }
  }
  t.same(await cdnState(cp), before, 'nothing stored');
  const o = await makeOrigin(cp, admin, { host: 'public.test' });
  const patch = await send(admin, 'PATCH', `/v1/cdn/origins/${o.id}`, { host: '::7f00:1' });
  t.equal(patch.status, 422, 'an update is checked alike');
  t.equal((await send(admin, 'GET', `/v1/cdn/origins/${o.id}`)).body.host, 'public.test', 'and changes nothing');
});

t.test('public hosts, and names that do not resolve, are accepted (the edge checks again when it dials)', async (t) => {
  for (const host of ['public.test', '8.8.8.8', '2001:4860:4860::8888', 'nowhere.test']) {
    t.equal((await send(admin, 'POST', '/v1/cdn/origins', { name: 'ok', host })).status, 201, host);
  }
});

t.test('PATCH re-checks the host: a private host or dropping allow_private_network is refused with 422 and changes nothing', async (t) => {
  const o = await makeOrigin(cp, admin);
  const before = await cdnState(cp);
  t.equal((await send(admin, 'PATCH', `/v1/cdn/origins/${o.id}`, { host: 'private.test' })).status, 422);
  const lab = await makeOrigin(cp, admin, { host: '10.0.0.5', allow_private_network: true });
  const mid = await cdnState(cp);
  t.equal((await send(admin, 'PATCH', `/v1/cdn/origins/${lab.id}`, { allow_private_network: false })).status, 422);
  t.same(await cdnState(cp), mid);
  t.not(before, mid);
});

t.test('POST /v1/cdn/origins refuses bad input with 400 naming the field, storing nothing', async (t) => {
  const cases: [Record<string, unknown>, string][] = [
    [{ host: '93.184.216.1' }, 'name'],
    [{ name: 'x'.repeat(101), host: '93.184.216.1' }, 'name'],
    [{ name: 'n' }, 'host'],
    [{ name: 'n', host: 'bad host' }, 'host'],
    [{ name: 'n', host: 'a..b' }, 'host'],
    [{ name: 'n', host: 'x'.repeat(254) }, 'host'],
    [{ name: 'n', host: 'example.com:8080' }, 'host'],
    [{ name: 'n', url: 'ftp://example.com' }, 'url'],
    [{ name: 'n', url: 'https://user:pw@example.com' }, 'url'],
    [{ name: 'n', url: 'https://example.com/?a=1' }, 'url'],
    [{ name: 'n', url: 'https://example.com', host: 'example.com' }, 'host'],
    [{ name: 'n', host: 'example.com', scheme: 'gopher' }, 'scheme'],
    [{ name: 'n', host: 'example.com', port: 0 }, 'port'],
    [{ name: 'n', host: 'example.com', port: 65536 }, 'port'],
    [{ name: 'n', host: 'example.com', path_prefix: 'no-slash' }, 'path_prefix'],
    [{ name: 'n', host: 'example.com', timeout_ms: 99 }, 'timeout_ms'],
    [{ name: 'n', host: 'example.com', timeout_ms: 60001 }, 'timeout_ms'],
    [{ name: 'n', host: 'example.com', connect_timeout_ms: 10001 }, 'connect_timeout_ms'],
    [{ name: 'n', host: 'example.com', max_retries: 6 }, 'max_retries'],
    [{ name: 'n', host: 'example.com', retry_on: ['4xx'] }, 'retry_on[0]'],
    [{ name: 'n', host: 'example.com', retry_on: ['5xx', '5xx'] }, 'retry_on'],
    [{ name: 'n', host: 'example.com', health_check_url: 'not a url' }, 'health_check_url'],
    [{ name: 'n', host: 'example.com', custom_headers: { 'bad name': 'v' } }, 'custom_headers.bad name'],
    [{ name: 'n', host: 'example.com', custom_headers: { Host: 'evil' } }, 'custom_headers.Host'],
    [{ name: 'n', host: 'example.com', custom_headers: { 'X-A': 'line\r\nInjected: 1' } }, 'custom_headers.X-A'],
    [{ name: 'n', host: 'example.com', tags: ['x'.repeat(65)] }, 'tags[0]'],
    [{ name: 'n', host: 'example.com', health_status: 'healthy' }, 'health_status'],
    [{ name: 'n', host: 'example.com', distribution_id: 'nope' }, 'distribution_id'],
  ];
  const before = await cdnState(cp);
  for (const [body, field] of cases) {
    const res = await send(admin, 'POST', '/v1/cdn/origins', body);
    t.equal(res.status, 400, `${JSON.stringify(body)} → 400`);
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `names ${field}: ${JSON.stringify(res.body.errors)}`);
  }
  t.same(await cdnState(cp), before, 'nothing stored');
});

t.test('distribution-scoped list and create: the origin belongs to the distribution; an unknown distribution is 404', async (t) => {
  const { endpoint, origin } = await makeEndpoint(cp, admin);
  const created = await send(admin, 'POST', `/v1/cdn/distributions/${endpoint.id}/origins`, { name: 'Second', host: 'public.test' });
  t.equal(created.status, 201, created.text);
  t.equal(created.body.distribution_id, endpoint.id);
  const list = await send(viewer, 'GET', `/v1/cdn/distributions/${endpoint.id}/origins`);
  t.same(list.body.data.map((o: { id: string }) => o.id), [origin.id, created.body.id], 'the default origin joined it, oldest first');
  t.equal(list.body.meta.total, 2);
  const missing = crypto.randomUUID();
  t.equal((await send(viewer, 'GET', `/v1/cdn/distributions/${missing}/origins`)).status, 404);
  t.equal((await send(admin, 'POST', `/v1/cdn/distributions/${missing}/origins`, { name: 'x', host: 'public.test' })).status, 404);
  const top = await send(admin, 'POST', '/v1/cdn/origins', { name: 'Joined', host: 'public.test', distribution_id: endpoint.id });
  t.equal(top.body.distribution_id, endpoint.id);
  const bad = await send(admin, 'POST', '/v1/cdn/origins', { name: 'x', host: 'public.test', distribution_id: missing });
  t.equal(bad.status, 422);
  t.equal(bad.body.errors[0].field, 'distribution_id');
});

t.test('PATCH /v1/cdn/origins/{id}: partial, If-Match 412 on a stale ETag, audit-logged with the changed fields', async (t) => {
  const o = await makeOrigin(cp, admin);
  const read = await send(viewer, 'GET', `/v1/cdn/origins/${o.id}`);
  const etag = read.headers.get('etag')!;
  const first = await send(admin, 'PATCH', `/v1/cdn/origins/${o.id}`, { timeout_ms: 10000, health_check_url: 'https://93.184.216.10/health' }, { 'if-match': etag });
  t.equal(first.status, 200, first.text);
  t.match(first.body, { timeout_ms: 10000, health_check_url: 'https://93.184.216.10/health', name: o.name, host: o.host });
  const before = await cdnState(cp);
  const stale = await send(admin, 'PATCH', `/v1/cdn/origins/${o.id}`, { timeout_ms: 20000 }, { 'if-match': etag });
  t.equal(stale.status, 412);
  t.same(await cdnState(cp), before, 'nothing changed');
  const cleared = await send(admin, 'PATCH', `/v1/cdn/origins/${o.id}`, { health_check_url: null }, { 'if-match': first.headers.get('etag')! });
  t.equal(cleared.body.health_check_url, null);
  const [audit] = await query<{ metadata: { changes: Record<string, unknown> } }>(cp,
    `select metadata from audit_log where action = 'origin.updated' and resource_id = ? order by created_at limit 1`, [o.id]);
  t.same(Object.keys(audit!.metadata.changes).sort(), ['health_check_url', 'timeout_ms']);
});

t.test('disable and delete are refused while the origin is in use; free origins can be disabled, enabled and deleted', async (t) => {
  const { endpoint, origin } = await makeEndpoint(cp, admin);
  const before = await cdnState(cp);
  const disable = await send(admin, 'POST', `/v1/cdn/origins/${origin.id}/disable`);
  t.equal(disable.status, 422);
  t.match(disable.body.errors[0].message, endpoint.id);
  t.equal((await send(admin, 'PATCH', `/v1/cdn/origins/${origin.id}`, { enabled: false })).status, 422);
  const del = await send(admin, 'DELETE', `/v1/cdn/origins/${origin.id}`);
  t.equal(del.status, 409);
  t.equal(del.body.code, 'RESOURCE_IN_USE');
  t.same(await cdnState(cp), before, 'nothing changed');

  const free = await makeOrigin(cp, admin);
  const off = await send(admin, 'POST', `/v1/cdn/origins/${free.id}/disable`);
  t.equal(off.status, 200);
  t.equal(off.body.enabled, false);
  t.equal((await send(admin, 'POST', `/v1/cdn/origins/${free.id}/enable`)).body.enabled, true);
  t.equal((await send(admin, 'DELETE', `/v1/cdn/origins/${free.id}`)).status, 204);
  t.equal((await send(viewer, 'GET', `/v1/cdn/origins/${free.id}`)).status, 404);
  t.equal((await query(cp, `select 1 from audit_log where action = 'origin.deleted' and resource_id = ?`, [free.id])).length, 1);
});

t.test('GET /v1/cdn/origins/{id}/health is unknown with nothing measured until edge nodes report', async (t) => {
  const o = await makeOrigin(cp, admin);
  const res = await send(viewer, 'GET', `/v1/cdn/origins/${o.id}/health`);
  t.equal(res.status, 200);
  t.same(res.body, {
    origin_id: o.id, status: 'unknown', latency_ms: null, last_success_at: null, last_failure_at: null, failure_reason: null, consecutive_failures: 0, checked_at: null,
  });
  t.equal((await send(viewer, 'GET', `/v1/cdn/origins/${crypto.randomUUID()}/health`)).status, 404);
});

t.test('GET /v1/cdn/origins pages, sorts, filters and searches names, hosts and tags', async (t) => {
  const tag = `batch${process.pid}`;
  const made: Record<string, any>[] = [];
  for (const name of ['Alpha', 'Bravo', 'Charlie']) made.push(await makeOrigin(cp, admin, { name: `${name} ${tag}`, host: `${name.toLowerCase()}.media.test`, tags: [tag] }));
  await send(admin, 'POST', `/v1/cdn/origins/${made[1]!.id}/disable`);
  const byName = await send(viewer, 'GET', `/v1/cdn/origins?q=${tag}&sort=name&limit=2`);
  t.same(byName.body.data.map((o: { name: string }) => o.name), [`Alpha ${tag}`, `Bravo ${tag}`]);
  t.match(byName.body.meta, { total: 3, count: 2, limit: 2, has_more: true });
  const next = await send(viewer, 'GET', `/v1/cdn/origins?q=${tag}&sort=name&limit=2&cursor=${byName.body.meta.next_cursor}`);
  t.same(next.body.data.map((o: { name: string }) => o.name), [`Charlie ${tag}`]);
  const desc = await send(viewer, 'GET', `/v1/cdn/origins?q=${tag}&sort=-name`);
  t.equal(desc.body.data[0].name, `Charlie ${tag}`);
  t.equal((await send(viewer, 'GET', `/v1/cdn/origins?q=${tag}&enabled=false`)).body.meta.total, 1);
  t.equal((await send(viewer, 'GET', `/v1/cdn/origins?q=${tag}&health_status=unknown`)).body.meta.total, 3);
  t.equal((await send(viewer, 'GET', `/v1/cdn/origins?q=bravo.media.test`)).body.data[0]?.id, made[1]!.id, 'a host whole');
  t.equal((await send(viewer, 'GET', `/v1/cdn/origins?q=charlie`)).body.data.some((o: { id: string }) => o.id === made[2]!.id), true, 'a word of a name or host');
  for (const bad of ['sort=port', 'health_status=fine', 'enabled=yes', 'limit=101', `q=${'x'.repeat(201)}`, 'colour=red']) {
    t.equal((await send(viewer, 'GET', `/v1/cdn/origins?${bad}`)).status, 400, bad);
  }
});

t.test('roles: viewers and operators read but cannot write (403, nothing changes); subscribers and anonymous callers get nothing', async (t) => {
  const o = await makeOrigin(cp, admin);
  const before = await cdnState(cp);
  for (const who of [viewer, operator]) {
    t.equal((await send(who, 'GET', '/v1/cdn/origins')).status, 200);
    t.equal((await send(who, 'GET', `/v1/cdn/origins/${o.id}`)).status, 200);
    t.equal((await send(who, 'POST', '/v1/cdn/origins', { name: 'x', host: 'public.test' })).status, 403);
    t.equal((await send(who, 'PATCH', `/v1/cdn/origins/${o.id}`, { name: 'y' })).status, 403);
    t.equal((await send(who, 'POST', `/v1/cdn/origins/${o.id}/disable`)).status, 403);
    t.equal((await send(who, 'DELETE', `/v1/cdn/origins/${o.id}`)).status, 403);
  }
  t.equal((await send(subscriber, 'GET', '/v1/cdn/origins')).status, 403);
  t.equal((await send(null, 'GET', '/v1/cdn/origins')).status, 401);
  t.same(await cdnState(cp), before);
});

t.test('Idempotency-Key: a replay returns the first origin; the same key with another body is 422', async (t) => {
  const key = crypto.randomUUID();
  const body = { name: uniqueName('idem'), host: 'public.test' };
  const first = await send(admin, 'POST', '/v1/cdn/origins', body, { 'idempotency-key': key });
  const again = await send(admin, 'POST', '/v1/cdn/origins', body, { 'idempotency-key': key });
  t.equal(again.status, 201);
  t.equal(again.body.id, first.body.id);
  t.equal(again.headers.get('idempotent-replayed'), 'true');
  t.equal((await query(cp, 'select 1 from cdn_origin where name = ?', [body.name])).length, 1);
  const other = await send(admin, 'POST', '/v1/cdn/origins', { ...body, name: 'other' }, { 'idempotency-key': key });
  t.equal(other.status, 422);
  t.equal(other.body.code, 'IDEMPOTENCY_KEY_REUSED');
});
