// Log drains' delivery at the control plane (issue 24 items 2 and 3): the
// connectivity test `POST /v1/cdn/log-drains/{id}/test` against local
// receivers (http, Elasticsearch, Datadog, S3 through s3rver, Cloud Storage
// with its token endpoint): success with a latency, failure when the receiver
// is down or refuses the credentials, an address logs may not go to refused,
// roles, production state untouched; and the state agents report in their
// heartbeats shown on the drain (error naming the node, active again, records
// dropped, a paused drain kept paused).
import { randomUUID } from 'node:crypto';
import t from 'tap';
import { query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers, makeEndpoint, uniqueName } from '../../../test/support/cdn.ts';
import { collectingLogger } from '../../../test/support/cdn-policies.ts';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { TestConfigSource, agentConnector, testTokens } from '../../../test/support/edge-channel.ts';
import { eventually } from '../../../test/support/eventually.ts';
import {
  bulkItems, datadogEntries, ECHO_FORMS, echoHeader, secretShown, serviceAccount, startGcsFake, startReceiver, startS3Fake,
} from '../../../test/support/log-receivers.ts';

const { log, lines } = collectingLogger();
const cp = await startTestControlPlane(t, {
  env: RELAXED_LIMITS, log,
  services: { edgeConfig: new TestConfigSource(), edgeAgentTokens: testTokens({ agt_good: randomUUID() }) },
});
await cp.app.edgeChannel!.hub.subscribed;
const { admin, operator, viewer } = await cdnCallers(cp);
const send = caller(cp);
const base = '/v1/cdn/log-drains';

async function makeDrain(destination_type: string, destination_config: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  // An endpoint of its own: a drain for every endpoint counts against each endpoint's cap (MAX_DRAINS_PER_ENDPOINT).
  const { endpoint } = await makeEndpoint(cp, admin);
  const res = await send(admin, 'POST', base, { name: uniqueName('drain'), destination_type, destination_config, endpoint_ids: [endpoint.id], ...extra });
  if (res.status !== 201) throw new Error(`create drain: ${res.status} ${res.text}`);
  return res.body as Record<string, any> & { id: string };
}

const test = (id: string, who = operator) => send(who, 'POST', `${base}/${id}/test`);

t.test('POST /v1/cdn/log-drains/{id}/test: one synthetic record, bare {success, latency_ms, error}; operators may; production untouched', async (t) => {
  const receiver = await startReceiver(t);
  const drain = await makeDrain('http', { url: `${receiver.url}/in`, auth_header: 'Bearer test-op-Secret-1', allow_private_network: true }, { fields: ['path', 'user_agent', 'status'] });
  const res = await test(drain.id);
  t.equal(res.status, 200);
  t.same(Object.keys(res.body).sort(), ['error', 'latency_ms', 'success']);
  t.equal(res.body.success, true);
  t.equal(res.body.error, '');
  t.ok(Number.isInteger(res.body.latency_ms) && res.body.latency_ms >= 0);
  t.equal(receiver.requests.length, 1);
  t.equal(receiver.requests[0]!.headers.authorization, 'Bearer test-op-Secret-1');
  t.same(JSON.parse(receiver.requests[0]!.body.toString()), { path: '/log-drain-test', user_agent: 'log-drain-test/1', status: 200 }, 'the drain\'s format and fields');
  t.equal((await test(drain.id, admin)).status, 200, 'admins too');
  t.equal((await test(drain.id, viewer)).status, 403, 'viewers may not');
  t.equal((await test(randomUUID())).status, 404);
  const after = (await send(viewer, 'GET', `${base}/${drain.id}`)).body;
  t.equal(after.status, 'active');
  t.equal(after.last_error, null);
  t.equal(after.version ?? after.updated_at, drain.version ?? drain.updated_at, 'the drain is not changed');

  await receiver.down();
  const down = await test(drain.id);
  t.equal(down.status, 200);
  t.equal(down.body.success, false);
  t.match(down.body.error, /127\.0\.0\.1:\d+: ECONNREFUSED/);
  t.ok(Number.isInteger(down.body.latency_ms));
  await receiver.up();
  receiver.fail = { status: 401, body: 'bad token Bearer test-op-Secret-1' };
  const refused = await test(drain.id);
  t.equal(refused.body.success, false);
  t.equal(refused.body.error, 'the receiver answered 401 Unauthorized', 'the status, never the receiver\'s text');
  t.equal((await send(viewer, 'GET', `${base}/${drain.id}`)).body.status, 'active', 'a failed test leaves the drain as it was');
});

t.test('the test through each destination\'s client: Elasticsearch bulk, Datadog intake, S3 and Cloud Storage, with wrong credentials failing', async (t) => {
  const receiver = await startReceiver(t);
  const es = await makeDrain('elasticsearch', { url: receiver.url, index: 'cdn-{yyyy}.{mm}', api_key: 'ZXMta2V5LXNlY3JldA', allow_private_network: true });
  t.equal((await test(es.id)).body.success, true);
  const [item] = bulkItems(receiver.requests.at(-1)!);
  t.match(item!.action.create._index, /^cdn-\d{4}\.\d{2}$/);
  t.equal(item!.doc.path, '/log-drain-test');

  const dd = await makeDrain('datadog', { site: 'datadoghq.com', api_key: 'dd-test-key-0001', url: `${receiver.url}/api/v2/logs`, allow_private_network: true });
  t.equal((await test(dd.id)).body.success, true);
  t.equal(datadogEntries(receiver.requests.at(-1)!, 'dd-test-key-0001').length, 1);

  const s3 = await startS3Fake(t, ['cdn-logs']);
  const good = await makeDrain('s3', { bucket: 'cdn-logs', region: 'us-east-1', access_key_id: 'S3RVER', secret_access_key: 'S3RVER', endpoint_url: s3.url, allow_private_network: true });
  t.equal((await test(good.id)).body.success, true);
  t.equal((await s3.objects('cdn-logs')).size, 1);
  const bad = await makeDrain('s3', { bucket: 'cdn-logs', region: 'us-east-1', access_key_id: 'UNKNOWNKEY', secret_access_key: 'S3RVER', endpoint_url: s3.url, allow_private_network: true });
  const badRes = (await test(bad.id)).body;
  t.equal(badRes.success, false);
  t.match(badRes.error, /S3 \(bucket cdn-logs\) answered 403/);

  let pem = '';
  const gcs = await startGcsFake(t, () => pem, 'drain-writer@project.iam.gserviceaccount.com');
  const account = serviceAccount(`${gcs.receiver.url}/token`);
  pem = account.publicKeyPem;
  const g = await makeDrain('gcs', { bucket: 'cdn-logs', service_account_json: account.json, endpoint_url: gcs.receiver.url, allow_private_network: true });
  t.equal((await test(g.id)).body.success, true);
  t.equal(gcs.objects.size, 1);
  const wrong = await makeDrain('gcs', { bucket: 'cdn-logs', service_account_json: serviceAccount(`${gcs.receiver.url}/token`).json, endpoint_url: gcs.receiver.url, allow_private_network: true });
  const wrongRes = (await test(wrong.id)).body;
  t.equal(wrongRes.success, false);
  t.match(wrongRes.error, /OAuth token endpoint answered 400.*invalid_grant/);
  t.notOk(lines.join('\n').includes('PRIVATE KEY'), 'no key in the log');
});

t.test('the test\'s error and the log never carry a credential, whatever form the receiver echoes it in (across the 200th character too)', async (t) => {
  const receiver = await startReceiver(t);
  const auth = 'Bearer echo-test-Secret-42';
  const key = 'echo-key-Secret-0042';
  const drain = await makeDrain('http', { url: `${receiver.url}/in`, auth_header: auth, headers: { 'X-Api-Key': key }, allow_private_network: true });
  const logged = lines.length;
  for (const [name, form] of Object.entries(ECHO_FORMS)) {
    for (const [header, secret] of [['authorization', auth], ['x-api-key', key]] as const) {
      echoHeader(receiver, 401, header, form);
      const res = (await test(drain.id)).body;
      t.equal(res.success, false);
      t.match(res.error, /^the receiver answered 401 Unauthorized/);
      t.same(secretShown(res.error, secret), [], `${header} echoed ${name}: ${res.error}`);
    }
  }
  const log = lines.slice(logged).join('\n');
  t.match(log, /log drain test failed/, 'the failures were logged');
  for (const secret of [auth, key]) t.same(secretShown(log, secret), [], 'nor in the log');
  const viewed = (await send(viewer, 'GET', `${base}/${drain.id}`)).text;
  for (const secret of [auth, key]) t.same(secretShown(viewed, secret), [], 'nor in what a viewer reads');
});

t.test('the test dials through the SSRF guard: a name that resolves to a metadata address is refused when it is dialled', async (t) => {
  // Accepted at write time (the name did not resolve then), refused at dial time.
  const drain = await makeDrain('http', { url: 'http://metadata.test.invalid/', allow_private_network: true });
  const res = (await test(drain.id)).body;
  t.equal(res.success, false);
  t.match(res.error, /ENOTFOUND|EAI_AGAIN|resolves only/);
  const literal = await send(admin, 'POST', base, { name: uniqueName('drain'), destination_type: 'http', destination_config: { url: 'http://169.254.169.254/', allow_private_network: true } });
  t.equal(literal.status, 422, 'and refused at write time when it is an address');
});

t.test('Elasticsearch takes JSON documents: log_format w3c_extended and stray braces in the index are 400', async (t) => {
  const w3c = await send(admin, 'POST', base, { name: uniqueName('drain'), destination_type: 'elasticsearch', log_format: 'w3c_extended', destination_config: { url: 'https://93.184.216.30:9200', index: 'cdn' } });
  t.equal(w3c.status, 400);
  t.same(w3c.body.errors.map((e: { field: string }) => e.field), ['log_format']);
  const braces = await send(admin, 'POST', base, { name: uniqueName('drain'), destination_type: 'elasticsearch', destination_config: { url: 'https://93.184.216.30:9200', index: 'cdn-{date}' } });
  t.equal(braces.status, 400);
  const drain = await makeDrain('elasticsearch', { url: 'https://93.184.216.30:9200', index: 'cdn-{yyyy}' });
  const patch = await send(admin, 'PATCH', `${base}/${drain.id}`, { log_format: 'w3c_extended' });
  t.equal(patch.status, 400);
  t.equal((await send(viewer, 'GET', `${base}/${drain.id}`)).body.log_format, 'ndjson', 'unchanged');
});

t.test('the delivery state agents report is shown on the drain: error naming the node, active again, records dropped, paused kept', async (t) => {
  const { connect } = agentConnector(t, cp.app.edgeChannel!.port, 'agt_good');
  const drain = await makeDrain('http', { url: 'https://93.184.216.40/in' });
  const paused = await makeDrain('http', { url: 'https://93.184.216.40/in' });
  await send(admin, 'POST', `${base}/${paused.id}/pause`);
  const revision = async () => (await query<{ revision: string }>(cp, 'select revision from cdn_config_revision'))[0]!.revision;
  const before = await revision();
  const { agent: a } = await connect({ hostname: 'edge-a' });
  const { agent: b } = await connect({ hostname: 'edge-b' });
  const read = async (id: string) => (await send(viewer, 'GET', `${base}/${id}`)).body;
  const state = (drainId: string, status: string, lastError = '', recordsDropped = 0n) => ({ drainId, status, lastError, recordsDropped, recordsShipped: 10n, batchesSent: 1n, bufferedBytes: 0n, lastDeliveredAtMs: 0n });

  a.heartbeat({ status: 'ok', logDrains: [state(drain.id, 'error', 'the receiver answered 503: down'), state(paused.id, 'error', 'x', 2n), state(randomUUID(), 'error', 'unknown drain')] });
  b.heartbeat({ status: 'ok', logDrains: [state(drain.id, 'active', '', 3n)] });
  await cp.app.edgeChannel!.hub.flush();
  await eventually(async () => (await read(drain.id)).status === 'error', 'drain in error');
  const inError = await read(drain.id);
  t.equal(inError.last_error, 'Edge node edge-a: the receiver answered 503: down');
  t.equal(inError.records_dropped, 3, 'drops summed over the nodes');
  const p = await read(paused.id);
  t.equal(p.status, 'paused', 'a paused drain stays paused');
  t.equal(p.records_dropped, 2);
  t.equal((await send(viewer, 'GET', `${base}?status=error`)).body.data.map((d: { id: string }) => d.id).includes(drain.id), true, 'listed under status=error');

  a.heartbeat({ status: 'ok', logDrains: [state(drain.id, 'active', '', 1n)] });
  await cp.app.edgeChannel!.hub.flush();
  await eventually(async () => (await read(drain.id)).status === 'active', 'drain active again');
  t.equal((await read(drain.id)).last_error, null);
  t.equal((await read(drain.id)).records_dropped, 4);

  // A node in error that goes offline no longer counts.
  b.heartbeat({ status: 'ok', logDrains: [state(drain.id, 'error', 'timeout', 3n)] });
  await cp.app.edgeChannel!.hub.flush();
  await eventually(async () => (await read(drain.id)).status === 'error', 'error from edge-b');
  b.close();
  await eventually(async () => {
    await cp.app.edgeChannel!.hub.flush();
    return (await read(drain.id)).status === 'active';
  }, 'active once edge-b is offline');
  t.equal(await revision(), before, 'delivery state is not configuration: nothing to publish');
});
