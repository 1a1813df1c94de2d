// Log drains through the real server (document 3 §2, §3, §4.10): create for
// each destination type with credentials sealed and masked, validation (400)
// and configuration checks (422: unknown endpoints, private or plain-http
// URLs), lists (status, q, sort), partial update with If-Match and "***"
// keeping stored credentials, pause/resume, delete, distribution aliases, the
// endpoint delete hook, roles, idempotency, and no credential in any read,
// list, audit entry, stored column or log line.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers, makeEndpoint, uniqueName } from '../../../test/support/cdn.ts';
import { collectingLogger, policiesState } from '../../../test/support/cdn-policies.ts';
import type { CdnServices } from './services.ts';
import { LogDrain } from './policies.entities.ts';
import { drainSecrets } from './log-drain-service.ts';
import { LOG_FIELDS } from './log-drain-record.ts';

const { log, lines } = collectingLogger();
const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS, log });
const dnsAnswers: Record<string, string[]> = { 'collector.internal.example': ['10.1.2.3'], 'logs.example.com': ['93.184.216.20'] };
(cp.app as unknown as CdnServices).cdnHostLookup = async (host) => dnsAnswers[host] ?? [];
const { admin, operator, viewer, subscriber } = await cdnCallers(cp);
const send = caller(cp);
const base = '/v1/cdn/log-drains';

// Every credential the tests send: none may appear anywhere but in the sealed column.
const SECRETS = {
  accessKey: 'AKIAEXAMPLEACCESSKEY1', secretKey: 'wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY', ddKey: 'dd0123456789abcdef0123456789abcd',
  esPassword: 'es-password-Secret-77', esApiKey: 'ZXMtYXBpLWtleS1zZWNyZXQ6dmFsdWU', authHeader: 'Bearer http-token-Secret-123', headerValue: 'x-header-Secret-456',
  privateKey: '-----BEGIN PRIVATE KEY-----\\nMIIEvgIBADANBgkqhkiG9w0BAQEFAASC-GCS-SECRET\\n-----END PRIVATE KEY-----\\n',
  newSecretKey: 'rotated-Secret-Access-Key-0000000000', newAuth: 'Bearer replaced-token-Secret-999',
};
const serviceAccount = JSON.stringify({ type: 'service_account', project_id: 'p', client_email: 'drain@p.iam.gserviceaccount.com', private_key: SECRETS.privateKey });

const s3 = (extra: Record<string, unknown> = {}) => ({
  bucket: 'cdn-logs', region: 'eu-west-1', prefix: 'edge/', access_key_id: SECRETS.accessKey, secret_access_key: SECRETS.secretKey, ...extra,
});
const CONFIGS: Record<string, Record<string, unknown>> = {
  s3: s3(),
  gcs: { bucket: 'cdn-logs-gcs', service_account_json: serviceAccount },
  datadog: { site: 'datadoghq.eu', api_key: SECRETS.ddKey, service: 'cdn', source: 'edge' },
  elasticsearch: { url: 'https://93.184.216.30:9200', index: 'cdn-logs', username: 'shipper', password: SECRETS.esPassword },
  http: { url: 'https://logs.example.com/ingest', auth_header: SECRETS.authHeader, headers: { 'X-Api-Key': SECRETS.headerValue, 'X-Team': 'video' } },
};

async function makeDrain(body: Record<string, unknown> = {}, path = base) {
  // An endpoint of its own unless the test says which: a drain for every endpoint counts against each endpoint's cap.
  const own = 'endpoint_ids' in body || path !== base ? {} : { endpoint_ids: [(await makeEndpoint(cp, admin)).endpoint.id] };
  const res = await send(admin, 'POST', path, { name: uniqueName('drain'), destination_type: 's3', destination_config: s3(), ...own, ...body });
  if (res.status !== 201) throw new Error(`create drain: ${res.status} ${res.text}`);
  return res.body as Record<string, any> & { id: string };
}

async function stored(id: string) {
  const em = cp.app.db.orm.em.fork();
  const drain = await em.findOneOrFail(LogDrain, id);
  return { drain, secrets: drainSecrets(cp.app, drain) };
}

const fieldsOf = (res: { body: { errors?: { field: string }[] } }) => (res.body.errors ?? []).map((e) => e.field);

t.test('POST /v1/cdn/log-drains: 201 bare with defaults, Location, ETag; credentials sealed and shown as "***"; audit-logged', async (t) => {
  const res = await send(admin, 'POST', base, { name: 'S3 archive', destination_type: 's3', destination_config: s3() });
  t.equal(res.status, 201, res.text);
  t.equal(res.headers.get('location'), `${base}/${res.body.id}`);
  t.ok(res.headers.get('etag'));
  t.same(res.body, {
    id: res.body.id, name: 'S3 archive', destination_type: 's3',
    destination_config: { bucket: 'cdn-logs', region: 'eu-west-1', prefix: 'edge/', access_key_id: '***', secret_access_key: '***', allow_private_network: false },
    log_format: 'ndjson', fields: [...LOG_FIELDS], endpoint_ids: [], status: 'active', last_error: null, records_dropped: 0,
    created_at: res.body.created_at, updated_at: res.body.updated_at,
  });
  const [row] = await query<{ destination_secrets_sealed: string; destination_config: Record<string, unknown> }>(
    cp, 'select destination_secrets_sealed, destination_config from cdn_log_drain where id = ?', [res.body.id]);
  t.match(row!.destination_secrets_sealed, /^v1\./, 'credentials stored sealed');
  t.same(row!.destination_config, res.body.destination_config, 'the clear column holds what replies show');
  t.same((await stored(res.body.id)).secrets, { access_key_id: SECRETS.accessKey, secret_access_key: SECRETS.secretKey }, 'the sealed credentials open');
  const [audit] = await query<{ actor_id: string; metadata: any }>(cp, `select actor_id, metadata from audit_log where action = 'log_drain.created' and resource_id = ?`, [res.body.id]);
  t.equal(audit?.actor_id, admin.id);
});

t.test('each destination type: its members kept, its credentials masked (header values each)', async (t) => {
  const expected: Record<string, Record<string, unknown>> = {
    gcs: { bucket: 'cdn-logs-gcs', service_account_json: '***', allow_private_network: false },
    datadog: { site: 'datadoghq.eu', api_key: '***', service: 'cdn', source: 'edge', allow_private_network: false },
    elasticsearch: { url: 'https://93.184.216.30:9200', index: 'cdn-logs', username: 'shipper', password: '***', allow_private_network: false },
    http: { url: 'https://logs.example.com/ingest', auth_header: '***', headers: { 'X-Api-Key': '***', 'X-Team': '***' }, allow_private_network: false },
  };
  for (const [type, config] of Object.entries(expected)) {
    const drain = await makeDrain({ destination_type: type, destination_config: CONFIGS[type], log_format: 'json', fields: ['timestamp', 'status', 'url'] });
    t.same(drain.destination_config, config, type);
    t.same(drain.fields, ['timestamp', 'status', 'url'], 'fields in the order given');
    t.equal(drain.log_format, 'json');
  }
  const es = await makeDrain({ destination_type: 'elasticsearch', destination_config: { url: 'https://93.184.216.30', index: 'logs', api_key: SECRETS.esApiKey } });
  t.same(es.destination_config.api_key, '***');
  const w3c = await makeDrain({ log_format: 'w3c_extended', destination_config: s3({ endpoint_url: 'https://s3.example.net' }) });
  t.equal(w3c.log_format, 'w3c_extended');
});

t.test('bad input is refused with 400 naming the field, storing nothing', async (t) => {
  const good = { name: 'x', destination_type: 's3', destination_config: s3() };
  const cases: [Record<string, unknown>, string][] = [
    [{ destination_type: 's3', destination_config: s3() }, 'name'],
    [{ ...good, name: 'x'.repeat(101) }, 'name'],
    [{ ...good, name: '' }, 'name'],
    [{ name: 'x', destination_config: s3() }, 'destination_type'],
    [{ ...good, destination_type: 'kafka' }, 'destination_type'],
    [{ name: 'x', destination_type: 's3' }, 'destination_config'],
    [{ ...good, destination_config: 'bucket' }, 'destination_config'],
    [{ ...good, log_format: 'csv' }, 'log_format'],
    [{ ...good, fields: ['timestamp', 'password'] }, 'fields[1]'],
    [{ ...good, fields: ['status', 'status'] }, 'fields'],
    [{ ...good, fields: [] }, 'fields'],
    [{ ...good, endpoint_ids: ['not-a-uuid'] }, 'endpoint_ids[0]'],
    [{ ...good, endpoint_ids: 'all' }, 'endpoint_ids'],
    [{ ...good, status: 'paused' }, 'status'],
    [{ ...good, last_error: 'x' }, 'last_error'],
    [{ ...good, destination_config: s3({ bucket: 'Bad_Bucket' }) }, 'destination_config.bucket'],
    [{ ...good, destination_config: s3({ region: 'EU WEST' }) }, 'destination_config.region'],
    [{ ...good, destination_config: { bucket: 'b-1', region: 'eu-west-1', access_key_id: SECRETS.accessKey } }, 'destination_config.secret_access_key'],
    [{ ...good, destination_config: s3({ site: 'datadoghq.com' }) }, 'destination_config.site'],
    [{ ...good, destination_config: s3({ endpoint_url: 'ftp://s3.example.net' }) }, 'destination_config.endpoint_url'],
    [{ ...good, destination_config: s3({ endpoint_url: 'https://user:pw@s3.example.net' }) }, 'destination_config.endpoint_url'],
    [{ ...good, destination_config: s3({ prefix: '/abs' }) }, 'destination_config.prefix'],
    [{ ...good, destination_config: s3({ secret_access_key: 'has spaces in it' }) }, 'destination_config.secret_access_key'],
    [{ ...good, destination_type: 'gcs', destination_config: { bucket: 'gcs-b', service_account_json: '{"type":"user"}' } }, 'destination_config.service_account_json'],
    [{ ...good, destination_type: 'gcs', destination_config: { bucket: 'gcs-b', service_account_json: 'not json' } }, 'destination_config.service_account_json'],
    [{ ...good, destination_type: 'datadog', destination_config: { site: 'datadog.example.com', api_key: SECRETS.ddKey } }, 'destination_config.site'],
    [{ ...good, destination_type: 'datadog', destination_config: { site: 'datadoghq.com' } }, 'destination_config.api_key'],
    [{ ...good, destination_type: 'elasticsearch', destination_config: { url: 'https://93.184.216.30', index: 'Logs' } }, 'destination_config.index'],
    [{ ...good, destination_type: 'elasticsearch', destination_config: { url: 'https://93.184.216.30', index: 'l', username: 'u' } }, 'destination_config.password'],
    [{ ...good, destination_type: 'elasticsearch', destination_config: { url: 'https://93.184.216.30', index: 'l', username: 'u', password: 'p', api_key: 'k' } }, 'destination_config.api_key'],
    [{ ...good, destination_type: 'http', destination_config: { url: 'not a url' } }, 'destination_config.url'],
    [{ ...good, destination_type: 'http', destination_config: { url: 'https://logs.example.com', headers: { 'Content-Length': '1' } } }, 'destination_config.headers.Content-Length'],
    [{ ...good, destination_type: 'http', destination_config: { url: 'https://logs.example.com', headers: { 'Bad Name': '1' } } }, 'destination_config.headers.Bad Name'],
    [{ ...good, destination_type: 'http', destination_config: { url: 'https://logs.example.com', auth_header: 'a', headers: { authorization: 'b' } } }, 'destination_config.headers'],
    [{ ...good, destination_type: 'http', destination_config: { url: 'https://logs.example.com', auth_header: '***' } }, 'destination_config.auth_header'],
    [{ ...good, destination_config: s3({ secret_access_key: '***' }) }, 'destination_config.secret_access_key'],
  ];
  const before = await policiesState(cp);
  for (const [body, field] of cases) {
    const res = await send(admin, 'POST', base, body);
    t.equal(res.status, 400, `${JSON.stringify(body).slice(0, 160)} → 400: ${res.text.slice(0, 200)}`);
    t.ok(fieldsOf(res).includes(field), `names ${field}: ${JSON.stringify(res.body.errors)}`);
  }
  t.same(await policiesState(cp), before, 'nothing changed');
});

t.test('422 INVALID_CONFIGURATION: unknown endpoint ids (naming the index), plain http and private or special URLs; nothing stored', async (t) => {
  const { endpoint } = await makeEndpoint(cp, admin);
  const missing = crypto.randomUUID();
  const before = await policiesState(cp);
  const unknown = await send(admin, 'POST', base, { name: 'x', destination_type: 's3', destination_config: s3(), endpoint_ids: [endpoint.id, missing] });
  t.equal(unknown.status, 422, unknown.text);
  t.equal(unknown.body.code, 'INVALID_CONFIGURATION');
  t.same(unknown.body.errors, [{ field: 'endpoint_ids[1]', message: `Endpoint ${missing} does not exist` }]);
  const refused: [string, Record<string, unknown>, string][] = [
    ['http', { url: 'https://10.0.0.5/ingest' }, 'destination_config.url'],
    ['http', { url: 'https://127.0.0.1/ingest' }, 'destination_config.url'],
    ['http', { url: 'https://localhost/ingest' }, 'destination_config.url'],
    ['http', { url: 'https://collector.internal.example/ingest' }, 'destination_config.url'],
    ['http', { url: 'https://[::ffff:192.168.1.1]/ingest' }, 'destination_config.url'],
    ['http', { url: 'http://logs.example.com/ingest' }, 'destination_config.url'],
    ['http', { url: 'https://169.254.169.254/latest', allow_private_network: true }, 'destination_config.url'],
    ['elasticsearch', { url: 'https://192.168.0.10:9200', index: 'l' }, 'destination_config.url'],
    ['s3', s3({ endpoint_url: 'https://10.9.8.7:9000' }), 'destination_config.endpoint_url'],
  ];
  for (const [type, config, field] of refused) {
    const res = await send(admin, 'POST', base, { name: 'x', destination_type: type, destination_config: config });
    t.equal(res.status, 422, `${JSON.stringify(config)}: ${res.text}`);
    t.same(fieldsOf(res), [field]);
  }
  t.same(await policiesState(cp), before, 'nothing changed');
  const allowed = await makeDrain({ destination_type: 'http', destination_config: { url: 'http://collector.internal.example:8080/ingest', allow_private_network: true } });
  t.same(allowed.destination_config, { url: 'http://collector.internal.example:8080/ingest', allow_private_network: true }, 'a private collector with the flag, plain http too');
});

t.test('GET list and read: newest first, status filter, q, sort, paging; unknown ids 404', async (t) => {
  const tag = `lst${process.pid}`;
  const a = await makeDrain({ name: `${tag} alpha` });
  const b = await makeDrain({ name: `${tag} bravo` });
  await send(admin, 'POST', `${base}/${a.id}/pause`);
  const list = await send(viewer, 'GET', `${base}?q=${tag}`);
  t.equal(list.status, 200, list.text);
  t.same(list.body.data.map((d: { id: string }) => d.id), [b.id, a.id]);
  t.same((await send(viewer, 'GET', `${base}?q=${tag}&sort=name`)).body.data.map((d: { id: string }) => d.id), [a.id, b.id]);
  t.same((await send(viewer, 'GET', `${base}?q=${tag}&status=paused`)).body.data.map((d: { id: string }) => d.id), [a.id]);
  t.same((await send(viewer, 'GET', `${base}?q=${tag}&status=active`)).body.data.map((d: { id: string }) => d.id), [b.id]);
  const paged = await send(viewer, 'GET', `${base}?q=${tag}&limit=1`);
  t.match(paged.body.meta, { total: 2, has_more: true });
  for (const bad of ['status=stopped', 'sort=status', 'limit=0', 'limit=101', 'bogus=1']) {
    t.equal((await send(viewer, 'GET', `${base}?${bad}`)).status, 400, bad);
  }
  const read = await send(viewer, 'GET', `${base}/${b.id}`);
  t.equal(read.status, 200);
  t.ok(read.headers.get('etag'));
  t.equal(read.body.destination_config.secret_access_key, '***');
  t.equal((await send(viewer, 'GET', `${base}/${crypto.randomUUID()}`)).status, 404);
  t.equal((await send(viewer, 'GET', `${base}/not-a-uuid`)).status, 400);
});

t.test('PATCH: partial; destination_config replaced with "***" keeping stored credentials; If-Match 412; bad input 400/422 change nothing', async (t) => {
  const { endpoint } = await makeEndpoint(cp, admin);
  const drain = await makeDrain({ name: 'to update' });
  const renamed = await send(admin, 'PATCH', `${base}/${drain.id}`, { name: 'renamed', log_format: 'json', fields: ['timestamp', 'url'], endpoint_ids: [endpoint.id] });
  t.equal(renamed.status, 200, renamed.text);
  t.match(renamed.body, { name: 'renamed', log_format: 'json', fields: ['timestamp', 'url'], endpoint_ids: [endpoint.id], destination_type: 's3' });
  t.same(renamed.body.destination_config, drain.destination_config, 'config untouched');

  // What a read shows can be sent back: "***" keeps each credential (the destination stays: see the next test).
  const read = await send(admin, 'GET', `${base}/${drain.id}`);
  const moved = await send(admin, 'PATCH', `${base}/${drain.id}`, { destination_config: { ...read.body.destination_config, prefix: undefined } }, { 'if-match': read.headers.get('etag')! });
  t.equal(moved.status, 200, moved.text);
  t.same(moved.body.destination_config, { bucket: 'cdn-logs', region: 'eu-west-1', access_key_id: '***', secret_access_key: '***', allow_private_network: false }, 'prefix removed, config replaced');
  t.same((await stored(drain.id)).secrets, { access_key_id: SECRETS.accessKey, secret_access_key: SECRETS.secretKey }, 'credentials kept');

  const rotated = await send(admin, 'PATCH', `${base}/${drain.id}`, { destination_config: { ...moved.body.destination_config, secret_access_key: SECRETS.newSecretKey } });
  t.equal(rotated.status, 200, rotated.text);
  t.equal(rotated.body.destination_config.secret_access_key, '***');
  t.same((await stored(drain.id)).secrets, { access_key_id: SECRETS.accessKey, secret_access_key: SECRETS.newSecretKey }, 'the new secret stored');
  const [audit] = await query<{ metadata: any }>(cp, `select metadata from audit_log where action = 'log_drain.updated' and resource_id = ? order by created_at desc limit 1`, [drain.id]);
  t.same(audit!.metadata.credentials_changed, ['secret_access_key'], 'the entry names the credential that changed, not its value');
  t.not(rotated.headers.get('etag'), moved.headers.get('etag'), 'a credential change is a new version');

  const before = await policiesState(cp);
  const stale = await send(admin, 'PATCH', `${base}/${drain.id}`, { name: 'stale' }, { 'if-match': read.headers.get('etag')! });
  t.equal(stale.status, 412);
  const bad: [Record<string, unknown>, number, string][] = [
    [{ destination_type: 'http' }, 400, 'destination_type'],
    [{ status: 'paused' }, 400, 'status'],
    [{ name: '' }, 400, 'name'],
    [{ destination_config: { url: 'https://logs.example.com' } }, 400, 'destination_config.url'],
    [{ destination_config: { bucket: 'b-1', region: 'eu-west-1', access_key_id: '***' } }, 400, 'destination_config.secret_access_key'],
    [{ fields: ['nope'] }, 400, 'fields[0]'],
    [{ endpoint_ids: [crypto.randomUUID()] }, 422, 'endpoint_ids[0]'],
    [{ destination_config: s3({ endpoint_url: 'https://10.0.0.1' }) }, 422, 'destination_config.endpoint_url'],
  ];
  for (const [body, status, field] of bad) {
    const res = await send(admin, 'PATCH', `${base}/${drain.id}`, body);
    t.equal(res.status, status, `${JSON.stringify(body)}: ${res.text}`);
    t.ok(fieldsOf(res).includes(field), `names ${field}: ${JSON.stringify(res.body.errors)}`);
  }
  const http = await makeDrain({ destination_type: 'http', destination_config: CONFIGS.http });
  const mid = await policiesState(cp);
  const unknownHeader = await send(admin, 'PATCH', `${base}/${http.id}`, { destination_config: { url: 'https://logs.example.com/ingest', headers: { 'X-Other': '***' } } });
  t.equal(unknownHeader.status, 400);
  t.same(fieldsOf(unknownHeader), ['destination_config.headers.X-Other']);
  t.same(await policiesState(cp), mid, 'nothing changed');
  t.ok(before);
  const kept = await send(admin, 'PATCH', `${base}/${http.id}`, { destination_config: { url: 'https://logs.example.com/ingest', auth_header: SECRETS.newAuth, headers: { 'x-api-key': '***' } } });
  t.equal(kept.status, 200, kept.text);
  t.same((await stored(http.id)).secrets, { auth_header: SECRETS.newAuth, headers: { 'x-api-key': SECRETS.headerValue } }, 'header kept case-insensitively, the dropped one gone');
  const same = await send(admin, 'PATCH', `${base}/${http.id}`, {});
  t.equal(same.body.updated_at, kept.body.updated_at, 'an empty update changes nothing');
});

t.test('credentials never follow a moved destination: "***" with a changed url, endpoint_url, site, bucket or region is 422 naming each masked credential, nothing changes', async (t) => {
  // Per kind: which members are the destination, which are the credentials (every one must come in clear once it moves).
  const kinds: { type: string; config: Record<string, unknown>; moves: Record<string, unknown>[]; stays: Record<string, unknown>; credentials: string[]; clear: Record<string, unknown> }[] = [
    {
      type: 's3', config: s3(), moves: [{ bucket: 'other-bucket' }, { region: 'us-east-1' }, { endpoint_url: 'https://s3.example.net' }], stays: { prefix: 'other/' },
      credentials: ['destination_config.access_key_id', 'destination_config.secret_access_key'],
      clear: { access_key_id: 'AKIAMOVEDACCESSKEY01', secret_access_key: 'moved-Secret-Access-Key-111111' },
    },
    {
      type: 'gcs', config: { ...CONFIGS.gcs, endpoint_url: 'https://storage.example.net' }, moves: [{ bucket: 'other-gcs-bucket' }, { endpoint_url: 'https://storage2.example.net' }, { endpoint_url: undefined }],
      stays: { prefix: 'p/' }, credentials: ['destination_config.service_account_json'],
      clear: { service_account_json: JSON.stringify({ type: 'service_account', client_email: 'moved@p.iam.gserviceaccount.com', private_key: 'moved-key' }) },
    },
    {
      type: 'datadog', config: CONFIGS.datadog, moves: [{ site: 'datadoghq.com' }, { url: 'https://logs.example.com/api/v2/logs' }], stays: { service: 'other' },
      credentials: ['destination_config.api_key'], clear: { api_key: 'dd-moved-Secret-000000000000000' },
    },
    {
      type: 'elasticsearch', config: CONFIGS.elasticsearch, moves: [{ url: 'https://93.184.216.31:9200' }, { url: 'https://93.184.216.30:9201' }], stays: { index: 'other-index', url: 'https://93.184.216.30:9200/' },
      credentials: ['destination_config.password'], clear: { password: 'es-moved-Secret-88' },
    },
    {
      type: 'elasticsearch', config: { url: 'https://93.184.216.30:9200', index: 'cdn-logs', api_key: SECRETS.esApiKey }, moves: [{ url: 'https://logs.example.com' }], stays: { index: 'x' },
      credentials: ['destination_config.api_key'], clear: { api_key: 'ZXMtbW92ZWQtU2VjcmV0' },
    },
    {
      type: 'http', config: CONFIGS.http, moves: [{ url: 'https://93.184.216.20/ingest' }, { url: 'https://logs.example.com/other' }],
      stays: { url: 'https://LOGS.example.com/ingest', allow_private_network: true },
      credentials: ['destination_config.auth_header', 'destination_config.headers.X-Api-Key', 'destination_config.headers.X-Team'],
      clear: { auth_header: 'Bearer moved-token-Secret-1', headers: { 'X-Api-Key': 'moved-header-Secret-2', 'X-Team': 'video' } },
    },
  ];
  const { endpoint } = await makeEndpoint(cp, admin);
  for (const kind of kinds) {
    const drain = await makeDrain({ destination_type: kind.type, destination_config: kind.config, endpoint_ids: [endpoint.id] });
    const shown = drain.destination_config as Record<string, unknown>;
    const secrets = (await stored(drain.id)).secrets;
    for (const move of kind.moves) {
      const before = await policiesState(cp);
      const audits = (await query(cp, `select 1 from audit_log where resource_id = ?`, [drain.id])).length;
      const res = await send(admin, 'PATCH', `${base}/${drain.id}`, { name: 'moved', destination_config: { ...shown, ...move } });
      t.equal(res.status, 422, `${kind.type} ${JSON.stringify(move)}: ${res.text}`);
      t.equal(res.body.code, 'INVALID_CONFIGURATION');
      t.same(fieldsOf(res).sort(), [...kind.credentials].sort(), `${kind.type} ${JSON.stringify(move)}: names every credential sent as "***"`);
      t.match(res.body.errors[0].message, /destination changes \(destination_config\.\w+\).*send this credential in clear/);
      t.same(await policiesState(cp), before, 'the stored drain is unchanged');
      t.equal((await query(cp, `select 1 from audit_log where resource_id = ?`, [drain.id])).length, audits, 'no audit entry');
    }
    // Half in clear is still a move with a kept secret: only the masked ones are named.
    if (kind.credentials.length > 1) {
      const [first] = Object.keys(kind.clear);
      const res = await send(admin, 'PATCH', `${base}/${drain.id}`, { destination_config: { ...shown, ...kind.moves[0], [first!]: kind.clear[first!] } });
      t.equal(res.status, 422);
      t.notOk(fieldsOf(res).includes(`destination_config.${first}`), 'a credential sent in clear is not named');
    }
    // An unchanged destination (a URL spelled another way included) keeps what "***" names.
    const stays = await send(admin, 'PATCH', `${base}/${drain.id}`, { destination_config: { ...shown, ...kind.stays } });
    t.equal(stays.status, 200, `${kind.type} stays: ${stays.text}`);
    t.same((await stored(drain.id)).secrets, secrets, `${kind.type}: "***" keeps the credentials of an unchanged destination`);
    // Moved with every credential in clear: stored.
    const moved = await send(admin, 'PATCH', `${base}/${drain.id}`, { destination_config: { ...stays.body.destination_config, ...kind.moves[0], ...kind.clear } });
    t.equal(moved.status, 200, `${kind.type} moved in clear: ${moved.text}`);
    t.same((await stored(drain.id)).secrets, kind.clear, `${kind.type}: the new credentials stored`);
  }
});

t.test('pause and resume: active → paused → active; asking again answers unchanged; audit-logged once each', async (t) => {
  const drain = await makeDrain();
  const paused = await send(admin, 'POST', `${base}/${drain.id}/pause`);
  t.equal(paused.status, 200, paused.text);
  t.equal(paused.body.status, 'paused');
  t.same(paused.body.destination_config, drain.destination_config, 'configuration kept');
  const again = await send(admin, 'POST', `${base}/${drain.id}/pause`);
  t.equal(again.status, 200);
  t.equal(again.body.updated_at, paused.body.updated_at, 'unchanged');
  const edited = await send(admin, 'PATCH', `${base}/${drain.id}`, { name: 'edited while paused' });
  t.equal(edited.body.status, 'paused', 'an update keeps it paused');
  const resumed = await send(admin, 'POST', `${base}/${drain.id}/resume`);
  t.equal(resumed.status, 200);
  t.equal(resumed.body.status, 'active');
  t.equal((await send(admin, 'POST', `${base}/${drain.id}/resume`)).body.status, 'active');
  // A drain in error (set by delivery) resumes to active with last_error cleared.
  await query(cp, `update cdn_log_drain set status = 'error', last_error = 'connection refused' where id = ?`, [drain.id]);
  const recovered = await send(admin, 'POST', `${base}/${drain.id}/resume`);
  t.match(recovered.body, { status: 'active', last_error: null });
  const actions = await query<{ action: string }>(cp, `select action from audit_log where resource_id = ? order by created_at, id`, [drain.id]);
  t.same(actions.map((a) => a.action).filter((a) => a !== 'log_drain.updated'), ['log_drain.created', 'log_drain.paused', 'log_drain.resumed', 'log_drain.resumed']);
  t.equal((await send(admin, 'POST', `${base}/${crypto.randomUUID()}/pause`)).status, 404);
  t.equal((await send(admin, 'POST', `${base}/${drain.id}/pause`, { now: true })).status, 400);
});

t.test('DELETE: 204, gone afterwards, audit-logged', async (t) => {
  const drain = await makeDrain();
  t.equal((await send(admin, 'DELETE', `${base}/${drain.id}`)).status, 204);
  t.equal((await send(viewer, 'GET', `${base}/${drain.id}`)).status, 404);
  t.equal((await send(admin, 'DELETE', `${base}/${drain.id}`)).status, 404);
  t.equal((await query(cp, `select 1 from audit_log where action = 'log_drain.deleted' and resource_id = ?`, [drain.id])).length, 1);
});

t.test('distribution aliases: create adds the distribution; the list shows drains naming it and drains for every endpoint', async (t) => {
  const { endpoint: e1 } = await makeEndpoint(cp, admin);
  const { endpoint: e2 } = await makeEndpoint(cp, admin);
  const scoped = `/v1/cdn/distributions/${e1.id}/log-drains`;
  const own = await makeDrain({ name: 'own' }, scoped);
  t.same(own.endpoint_ids, [e1.id]);
  const both = await makeDrain({ name: 'both', endpoint_ids: [e2.id] }, scoped);
  t.same(both.endpoint_ids, [e2.id, e1.id]);
  const dup = await makeDrain({ name: 'dup', endpoint_ids: [e1.id] }, scoped);
  t.same(dup.endpoint_ids, [e1.id], 'not added twice');
  const other = await makeDrain({ name: 'other', endpoint_ids: [e2.id] });
  const list = await send(viewer, 'GET', scoped);
  t.equal(list.status, 200, list.text);
  const ids = list.body.data.map((d: { id: string }) => d.id);
  t.same(ids.filter((id: string) => [own.id, both.id, dup.id, other.id].includes(id)), [own.id, both.id, dup.id], 'oldest first, not the other endpoint\'s');
  const everyEndpoint = (await query<{ id: string }>(cp, `select id from cdn_log_drain where endpoint_ids = '[]'::jsonb`)).map((r) => r.id);
  t.ok(everyEndpoint.length > 0 && everyEndpoint.every((id) => ids.includes(id)), 'drains for every endpoint are listed too');
  t.equal((await send(viewer, 'GET', `/v1/cdn/distributions/${crypto.randomUUID()}/log-drains`)).status, 404);
  const before = await policiesState(cp);
  t.equal((await send(admin, 'POST', `/v1/cdn/distributions/${crypto.randomUUID()}/log-drains`, { name: 'x', destination_type: 's3', destination_config: s3() })).status, 404);
  t.equal((await send(admin, 'POST', scoped, { name: 'x', destination_type: 's3' })).status, 400);
  t.equal((await send(viewer, 'GET', `${scoped}?sort=name`)).status, 400);
  t.same(await policiesState(cp), before, 'nothing changed');
});

t.test('deleting an endpoint takes it out of every drain in its transaction; a drain left with none is paused, not widened', async (t) => {
  const { endpoint: e1 } = await makeEndpoint(cp, admin);
  const { endpoint: e2 } = await makeEndpoint(cp, admin);
  const shared = await makeDrain({ endpoint_ids: [e1.id, e2.id] });
  const only = await makeDrain({ endpoint_ids: [e1.id] });
  const all = await makeDrain({ endpoint_ids: [] });
  t.equal((await send(admin, 'DELETE', `/v1/cdn/endpoints/${e1.id}`)).status, 204);
  t.match((await send(viewer, 'GET', `${base}/${shared.id}`)).body, { endpoint_ids: [e2.id], status: 'active' });
  const alone = (await send(viewer, 'GET', `${base}/${only.id}`)).body;
  t.match(alone, { endpoint_ids: [], status: 'paused' });
  t.match(alone.last_error, /last endpoint .* was deleted/);
  t.match((await send(viewer, 'GET', `${base}/${all.id}`)).body, { endpoint_ids: [], status: 'active' }, 'a drain for every endpoint is untouched');
  const entries = await query<{ resource_id: string; metadata: any }>(cp, `select resource_id, metadata from audit_log where action = 'log_drain.updated' and metadata->>'endpoint_id' = ?`, [e1.id]);
  t.same(entries.map((e) => e.resource_id).sort(), [shared.id, only.id].sort());
});

t.test('roles: viewers and operators read but cannot write (403, nothing changes); subscribers and anonymous callers get nothing', async (t) => {
  const drain = await makeDrain();
  const { endpoint } = await makeEndpoint(cp, admin);
  const before = await policiesState(cp);
  const body = { name: 'x', destination_type: 's3', destination_config: s3() };
  for (const who of [viewer, operator]) {
    t.equal((await send(who, 'GET', base)).status, 200);
    t.equal((await send(who, 'GET', `${base}/${drain.id}`)).status, 200);
    t.equal((await send(who, 'GET', `/v1/cdn/distributions/${endpoint.id}/log-drains`)).status, 200);
    t.equal((await send(who, 'POST', base, body)).status, 403);
    t.equal((await send(who, 'POST', `/v1/cdn/distributions/${endpoint.id}/log-drains`, body)).status, 403);
    t.equal((await send(who, 'PATCH', `${base}/${drain.id}`, { name: 'y' })).status, 403);
    t.equal((await send(who, 'POST', `${base}/${drain.id}/pause`)).status, 403);
    t.equal((await send(who, 'POST', `${base}/${drain.id}/resume`)).status, 403);
    t.equal((await send(who, 'DELETE', `${base}/${drain.id}`)).status, 403);
  }
  t.equal((await send(subscriber, 'GET', base)).status, 403);
  t.equal((await send(null, 'GET', base)).status, 401);
  t.equal((await send(null, 'POST', base, body)).status, 401);
  t.same(await policiesState(cp), before);
});

t.test('Idempotency-Key: a replay returns the first drain without making another; another body with the key is 422', async (t) => {
  const key = crypto.randomUUID();
  const body = { name: 'idem drain', destination_type: 'datadog', destination_config: CONFIGS.datadog };
  const first = await send(admin, 'POST', base, body, { 'idempotency-key': key });
  t.equal(first.status, 201, first.text);
  const again = await send(admin, 'POST', base, body, { 'idempotency-key': key });
  t.equal(again.status, 201);
  t.equal(again.body.id, first.body.id);
  t.equal((await query(cp, 'select 1 from cdn_log_drain where name = ?', ['idem drain'])).length, 1);
  const other = await send(admin, 'POST', base, { ...body, name: 'another' }, { 'idempotency-key': key });
  t.equal(other.status, 422);
  t.equal(other.body.code, 'IDEMPOTENCY_KEY_REUSED');
});

t.test('no credential appears in any read, list, audit entry, stored column in clear or log line', async (t) => {
  const texts: string[] = [];
  texts.push((await send(viewer, 'GET', `${base}?limit=100`)).text);
  for (const row of await query<{ id: string }>(cp, 'select id from cdn_log_drain')) texts.push((await send(viewer, 'GET', `${base}/${row.id}`)).text);
  texts.push(JSON.stringify(await query(cp, `select * from audit_log where resource_type = 'log_drain'`)));
  texts.push(JSON.stringify(await query(cp, 'select * from cdn_log_drain')));
  texts.push(lines.join('\n'));
  t.ok(lines.length > 10, 'the log was collected');
  const secrets = [...Object.values(SECRETS), serviceAccount, 'MIIEvgIBADANBgkqhkiG9w0BAQEFAASC-GCS-SECRET'];
  for (const secret of secrets) {
    for (const text of texts) t.notOk(text.includes(secret), `${secret.slice(0, 12)}… absent`);
  }
});
