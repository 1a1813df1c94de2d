// The destination clients against local receivers that check each
// protocol's format: the three log formats on the http destination, the
// Elasticsearch bulk API, Datadog's intake, S3 (s3rver checks the SigV4
// signature) and Cloud Storage's upload with a service account's OAuth token;
// a batch sent twice is one object or one document; wrong credentials fail.
import t from 'tap';
import {
  bodyText, bulkItems, datadogEntries, ECHO_FORMS, echoHeader, secretShown, serviceAccount, sigV4Valid, startGcsFake, startReceiver, startS3Fake,
} from '../../../test/support/log-receivers.ts';
import { frameBatch, lineRenderer, syntheticRecord, w3cFields, type AccessRecord, type LogFormat } from './access-record.ts';
import { batchLines, batchOfLines, DeliveryError, safeText, scrub, type Batch, type DrainSpec } from './destination.ts';
import { createDestination } from './destinations.ts';
import { indexFor } from './elasticsearch.ts';

const records: AccessRecord[] = [
  { ...syntheticRecord('edge-1', Date.UTC(2026, 10, 27, 23, 59, 59, 500)), request_id: 'r-1', path: '/a b/ü', query: 'q="x"', user_agent: 'curl/8 (x)' },
  { ...syntheticRecord('edge-1', Date.UTC(2026, 10, 28, 0, 0, 1)), request_id: 'r-2', path: '/two', status: 404, origin_duration_ms: 12.3456 },
];

function batchOf(fields: string[], spec: { lineFormat: LogFormat }): Batch {
  const render = lineRenderer(spec.lineFormat, fields);
  return batchOfLines(crypto.randomUUID(), records.map(render), records.map((r) => r.timestamp), records.map((r) => r.request_id));
}

/** The DeliveryError a send fails with (a test failure when it does not fail). */
async function failure(work: Promise<unknown>): Promise<DeliveryError> {
  try {
    await work;
  } catch (e) {
    if (e instanceof DeliveryError) return e;
    throw e;
  }
  throw new Error('expected the send to fail');
}

const spec = (type: DrainSpec['destination_type'], config: Record<string, unknown>, format: LogFormat = 'ndjson', fields: string[] = []): DrainSpec => ({
  id: crypto.randomUUID(), destination_type: type, destination_config: { allow_private_network: true, ...config }, log_format: format, fields,
});

t.test('json, ndjson and w3c_extended lines and batches', async (t) => {
  const fields = ['timestamp', 'client_ip', 'method', 'url', 'status', 'bytes_sent', 'cache_status', 'edge_node', 'user_agent', 'origin_duration_ms'];
  const json = lineRenderer('json', fields);
  t.same(JSON.parse(json(records[0]!)), {
    timestamp: '2026-11-27T23:59:59.500Z', client_ip: '192.0.2.1', method: 'GET', url: 'https://log-drain-test.invalid/a b/ü?q="x"', status: 200,
    bytes_sent: 0, cache_status: 'HIT', edge_node: 'edge-1', user_agent: 'curl/8 (x)', origin_duration_ms: null,
  });
  t.equal(JSON.parse(json(records[1]!)).origin_duration_ms, 12.346, 'times to the microsecond');
  t.same(JSON.parse(frameBatch('json', fields, records.map(json))).length, 2, 'json: one array');
  const nd = frameBatch('ndjson', fields, records.map(json));
  t.equal(nd.split('\n').length, 3, 'ndjson: a line per record, newline-terminated');
  t.same(nd.trim().split('\n').map((l) => JSON.parse(l).status), [200, 404]);
  const w3c = lineRenderer('w3c_extended', fields);
  t.equal(w3c(records[0]!), '2026-11-27 23:59:59.500 192.0.2.1 GET https://log-drain-test.invalid/a%20b/%C3%BC?q=%22x%22 200 0 HIT edge-1 curl/8%20(x) -');
  const file = frameBatch('w3c_extended', fields, records.map(w3c), Date.UTC(2026, 10, 28));
  t.same(file.split('\n').slice(0, 3), ['#Version: 1.0', `#Fields: ${w3cFields(fields)}`, '#Date: 2026-11-28 00:00:00']);
  t.equal(w3cFields(fields), 'date time c-ip cs-method cs-uri sc-status sc-bytes x-cache-status s-computername cs(User-Agent) x-origin-time-taken');
  t.equal(file.split('\n')[3]!.split(' ').length, 11, 'one value per #Fields name (date and time are two)');
});

t.test('http: the drain\'s format, headers and auth, one POST per batch', async (t) => {
  const receiver = await startReceiver(t);
  for (const format of ['json', 'ndjson', 'w3c_extended'] as const) {
    const d = createDestination(spec('http', { url: `${receiver.url}/logs`, auth_header: 'Bearer s3cret-token', headers: { 'X-Tenant': 'acme' } }, format, ['request_id', 'path']), { nodeName: 'edge-1' });
    const batch = batchOf(['request_id', 'path'], d);
    await d.send(batch);
    const got = receiver.requests.at(-1)!;
    t.equal(got.headers.authorization, 'Bearer s3cret-token');
    t.equal(got.headers['x-tenant'], 'acme');
    t.equal(got.headers['x-batch-id'], batch.id);
    const noDate = (text: string) => text.replace(/#Date: .*\n/, '');
    t.equal(noDate(got.body.toString()), noDate(frameBatch(format, ['request_id', 'path'], batchLines(batch))), `${format} body`);
  }
  t.equal(receiver.requests[0]!.headers['content-type'], 'application/json');
  t.equal(receiver.requests[1]!.headers['content-type'], 'application/x-ndjson');
  t.equal(receiver.requests[2]!.headers['content-type'], 'text/plain; charset=utf-8');
});

t.test('elasticsearch: bulk create actions with the record id, the index dated per record, API key or basic auth', async (t) => {
  const receiver = await startReceiver(t);
  const es = createDestination(spec('elasticsearch', { url: `${receiver.url}/`, index: 'cdn-{yyyy}.{mm}.{dd}', api_key: 'ZXM6a2V5' }), { nodeName: 'edge-1' });
  t.equal(es.lineFormat, 'ndjson', 'documents are JSON whatever the drain\'s format');
  const batch = batchOf([], es);
  await es.send(batch);
  const got = receiver.requests.at(-1)!;
  t.equal(got.headers.authorization, 'ApiKey ZXM6a2V5');
  const items = bulkItems(got);
  t.same(items.map((i) => i.action), [{ create: { _index: 'cdn-2026.11.27', _id: 'r-1' } }, { create: { _index: 'cdn-2026.11.28', _id: 'r-2' } }], 'each record in its own day');
  t.equal(items[1]!.doc.status, 404);
  t.equal(indexFor('logs-{yyyy}-{hh}', Date.UTC(2026, 0, 2, 3)), 'logs-2026-03');

  // A batch sent again: every item answers 409 (already there), which is delivered.
  receiver.handle = (_r, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ errors: true, items: [{ create: { status: 409, error: { type: 'version_conflict_engine_exception' } } }, { create: { status: 201 } }] }));
    return true;
  };
  await es.send(batch);
  receiver.handle = (_r, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ errors: true, items: [{ create: { status: 201 } }, { create: { status: 429, error: { type: 'es_rejected_execution_exception' } } }] }));
    return true;
  };
  {
    const f = await failure(es.send(batch));
    t.ok(f.retryable && /429 es_rejected_execution_exception/.test(f.message), f.message);
  }
  receiver.handle = (_r, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ errors: true, items: [{ create: { status: 400, error: { type: 'mapper_parsing_exception', reason: 'failed to parse' } } }] }));
    return true;
  };
  {
    const f = await failure(es.send(batch));
    t.ok(!f.retryable, f.message);
  }
  receiver.handle = undefined;
  const basic = createDestination(spec('elasticsearch', { url: receiver.url, index: 'cdn', username: 'elastic', password: 'changeme-pw' }), { nodeName: 'edge-1' });
  await basic.send(batch);
  t.equal(receiver.requests.at(-1)!.headers.authorization, `Basic ${Buffer.from('elastic:changeme-pw').toString('base64')}`);
});

t.test('datadog: the intake\'s JSON array, gzip, DD-API-KEY, message in the drain\'s format', async (t) => {
  const receiver = await startReceiver(t);
  const dd = createDestination(spec('datadog', { site: 'datadoghq.eu', api_key: 'dd-key-123456', service: 'cdn', source: 'edge', url: `${receiver.url}/api/v2/logs` }, 'w3c_extended', ['request_id', 'status']), { nodeName: 'edge-1' });
  await dd.send(batchOf(['request_id', 'status'], dd));
  const got = receiver.requests.at(-1)!;
  t.equal(got.headers['content-encoding'], 'gzip');
  t.same(datadogEntries(got, 'dd-key-123456'), [
    { ddsource: 'edge', service: 'cdn', hostname: 'edge-1', message: 'r-1 200' },
    { ddsource: 'edge', service: 'cdn', hostname: 'edge-1', message: 'r-2 404' },
  ]);
  receiver.fail = { status: 403, body: '{"errors":[{"status":"403","title":"Forbidden"}]}' };
  t.match((await failure(dd.send(batchOf([], dd)))).message, /Datadog answered 403/);
  receiver.fail = null;
});

t.test('s3: a gzip object per batch under a time-partitioned key, signed; a key s3rver does not know is refused', async (t) => {
  const s3 = await startS3Fake(t, ['cdn-logs']);
  const config = { bucket: 'cdn-logs', region: 'us-east-1', prefix: 'edge/', access_key_id: 'S3RVER', secret_access_key: 'S3RVER', endpoint_url: s3.url };
  const d = createDestination(spec('s3', config, 'ndjson', ['request_id', 'status']), { nodeName: 'edge 1' });
  const batch = batchOf(['request_id', 'status'], d);
  await d.send(batch);
  await d.send(batch);
  const objects = await s3.objects('cdn-logs');
  t.same([...objects.keys()], [`edge/2026/11/27/23/edge_1-${batch.id}.ndjson.gz`], 'one object, sent twice');
  t.equal([...objects.values()][0], '{"request_id":"r-1","status":200}\n{"request_id":"r-2","status":404}\n');
  const wrong = createDestination(spec('s3', { ...config, access_key_id: 'NOT-A-KEY-ID' }), { nodeName: 'edge-1' });
  {
    const f = await failure(wrong.send(batch));
    t.ok(/S3 \(bucket cdn-logs\) answered 403/.test(f.message) && !f.message.includes('not-the-secret'), f.message);
  }
});

t.test('s3: the signature is SigV4 over the request as sent (checked with the secret by a receiver), also virtual-host style', async (t) => {
  const receiver = await startReceiver(t);
  const config = { bucket: 'logs', region: 'eu-west-1', access_key_id: 'AKIDEXAMPLE', secret_access_key: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY', endpoint_url: `${receiver.url}/base` };
  const d = createDestination(spec('s3', config, 'w3c_extended'), { nodeName: 'edge-1' });
  const batch = batchOf([], d);
  await d.send(batch);
  const got = receiver.requests.at(-1)!;
  t.equal(got.method, 'PUT');
  t.match(got.url, new RegExp(`^/base/logs/2026/11/27/23/edge-1-${batch.id}\\.log\\.gz$`), 'path style under the endpoint URL');
  t.ok(await sigV4Valid(got, config.secret_access_key), 'signed with the secret');
  t.notOk(await sigV4Valid(got, 'another-secret'), 'not with another');
  t.match(String(got.headers['x-amz-content-sha256']), /^[0-9a-f]{64}$/, 'the payload is signed');
  t.match(bodyText(got), /^#Version: 1\.0\n#Fields: date time x-request-id/);
});

t.test('gcs: OAuth token from the service account, media upload of a gzip object, a batch sent twice is one object', async (t) => {
  let pem = '';
  const fake = await startGcsFake(t, () => pem, 'drain-writer@project.iam.gserviceaccount.com');
  const account = serviceAccount(`${fake.receiver.url}/token`);
  pem = account.publicKeyPem;
  const d = createDestination(spec('gcs', { bucket: 'cdn-logs', prefix: 'p', service_account_json: account.json, endpoint_url: fake.receiver.url }, 'json', ['request_id']), { nodeName: 'edge-1' });
  const batch = batchOf(['request_id'], d);
  await d.send(batch);
  await d.send(batch);
  t.same([...fake.objects.keys()], [`p/2026/11/27/23/edge-1-${batch.id}.json.gz`]);
  t.equal(bodyText({ method: '', url: '', headers: {}, body: fake.objects.values().next().value! }), '[{"request_id":"r-1"},{"request_id":"r-2"}]');
  t.equal(fake.tokensIssued, 1, 'the token is kept until it nears its end');
  const other = serviceAccount(`${fake.receiver.url}/token`);
  const wrong = createDestination(spec('gcs', { bucket: 'cdn-logs', service_account_json: other.json, endpoint_url: fake.receiver.url }), { nodeName: 'edge-1' });
  {
    const f = await failure(wrong.send(batch));
    t.ok(/OAuth token endpoint answered 400.*invalid_grant/.test(f.message) && !f.message.includes('PRIVATE KEY'), f.message);
  }
});

t.test('an address logs may not go to is refused at dial time', async (t) => {
  const d = createDestination(spec('http', { url: 'http://169.254.169.254/latest', allow_private_network: true }), { nodeName: 'edge-1', timeoutMs: 2_000 });
  {
    const f = await failure(d.send(batchOf([], d)));
    t.ok(/resolves only to addresses logs may not be sent to/.test(f.message), f.message);
  }
  const p = createDestination(spec('http', { url: 'http://127.0.0.1:9/x', allow_private_network: false }), { nodeName: 'edge-1', timeoutMs: 2_000 });
  t.match((await failure(p.send(batchOf([], p)))).message, /127\.0\.0\.1/);
});

t.test('scrub finds a secret however it is written back: as it is, percent-encoded (twice), JSON-escaped (twice), \\u-escaped, base64 at any alignment in either alphabet, in any case', async (t) => {
  const secret = 'Bearer tok/en+"x\\y Secret-123';
  const forms: Record<string, string> = {
    raw: secret, 'percent-encoded': encodeURIComponent(secret), 'percent-encoded twice': encodeURIComponent(encodeURIComponent(secret)),
    'percent-encoded, lower-case hex': encodeURIComponent(secret).toLowerCase(), 'form-encoded': new URLSearchParams({ v: secret }).toString().slice(2),
    'JSON-escaped': JSON.stringify(secret).slice(1, -1), 'JSON-escaped twice': JSON.stringify(JSON.stringify(secret)).slice(1, -1),
    '\\u-escaped': secret.replace(/[^A-Za-z]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`),
    'upper-cased': secret.toUpperCase(), 'lower-cased': secret.toLowerCase(),
    base64: Buffer.from(secret).toString('base64'), 'base64, one byte in': Buffer.from(`x${secret}`).toString('base64'),
    'base64, two bytes in': Buffer.from(`xy${secret}`).toString('base64'), base64url: Buffer.from(`xy${secret}`).toString('base64url'),
    'base64, percent-encoded': encodeURIComponent(Buffer.from(secret).toString('base64')),
  };
  for (const [name, form] of Object.entries(forms)) {
    const out = scrub(`before ${form} after`, [secret]);
    t.same(secretShown(out, secret), [], `${name}: ${out}`);
    t.match(out, /^before .*\*\*\*.* after$/, `${name}: the text around it stays`);
  }
  t.equal(scrub('nothing to see', [secret, 'abc']), 'nothing to see', 'other text untouched (secrets under 4 characters are not scrubbed)');
});

t.test('safeText scrubs before it cuts: a secret across the limit is replaced whole, not left half-shown', async (t) => {
  const secret = 'straddling-Secret-0123456789';
  for (let at = 180; at < 200; at++) {
    const text = safeText(`${'x'.repeat(at)}${secret} tail`, [secret], 200);
    t.ok(text.length <= 200, 'cut to the limit');
    t.same(secretShown(text, secret), [], `at ${at}: ${text.slice(170)}`);
  }
});

t.test('an answer\'s error never shows the receiver\'s body, only its status and error code, scrubbed: a receiver echoing a credential in any form leaks nothing', async (t) => {
  const receiver = await startReceiver(t);
  const auth = 'Bearer echoed-token-Secret-1234';
  const key = 'echoed-key-Secret-5678';
  const d = createDestination(spec('http', { url: `${receiver.url}/in`, auth_header: auth, headers: { 'X-Api-Key': key } }), { nodeName: 'edge-1' });
  for (const [name, form] of Object.entries(ECHO_FORMS)) {
    for (const [header, secret] of [['authorization', auth], ['x-api-key', key]] as const) {
      echoHeader(receiver, 401, header, form);
      const f = await failure(d.send(batchOf([], d)));
      t.same(secretShown(f.message, secret), [], `${header} echoed ${name}: ${f.message}`);
      t.match(f.message, /^the receiver answered 401 Unauthorized( \(\*\*\*\))?$/, `${header} echoed ${name}: the status (the code scrubbed)`);
    }
  }
  // Elasticsearch's bulk items: the error type, never the reason (free text).
  const es = createDestination(spec('elasticsearch', { url: receiver.url, index: 'cdn', api_key: key }), { nodeName: 'edge-1' });
  receiver.handle = (r, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ errors: true, items: [{ create: { status: 400, error: { type: 'mapper_parsing_exception', reason: `bad: ${r.headers.authorization}` } } }] }));
    return true;
  };
  const f = await failure(es.send(batchOf([], es)));
  t.equal(f.message, 'Elasticsearch refused a document (400 mapper_parsing_exception)');
  receiver.handle = undefined;
});
