// A log drain moved to another destination through a real control plane and a
// real agent: sent with "***" its credentials stay behind (422, the drain
// unchanged, still shipping to where it was); sent in clear, the records held
// for the old receiver while it was down, the next batches and the
// connectivity test reach the new receiver with the new credentials only.
// Neither the old secrets (raw or base64) nor the old Cloud Storage token ever
// reach the new receiver (http, Elasticsearch, Datadog, Cloud Storage).
import t from 'tap';
import { agentHealth, publishedEndpoint, startCountingOrigin, startDeployment, startEdgeAgent, viewerGet } from '../support/edge-deployment.ts';
import { eventually } from '../support/eventually.ts';
import { bodyText, bulkItems, datadogEntries, serviceAccount, startGcsFake, startReceiver, type Received } from '../support/log-receivers.ts';
import { detectServices } from '../support/services.ts';

const { postgresUrl } = await detectServices();
if (!postgresUrl) t.pass('skipped: needs PostgreSQL');
else await t.test('a moved drain\'s next batch and its connectivity test never carry the old secret to the new receiver', { timeout: 180_000 }, async (t) => {
  const deployment = await startDeployment(t, { postgresUrl, env: { EDGE_HEARTBEAT_INTERVAL_MS: '300' } });
  const origin = await startCountingOrigin(t);
  const endpoint = await publishedEndpoint(deployment, origin.port, 'moving');
  const receivers = async () => ({ http: await startReceiver(t), es: await startReceiver(t), dd: await startReceiver(t) });
  const before = await receivers();
  const after = await receivers();
  let keys: Record<'before' | 'after', ReturnType<typeof serviceAccount>> | null = null;
  const gcsBefore = await startGcsFake(t, () => keys!.before.publicKeyPem, 'drain-writer@project.iam.gserviceaccount.com');
  const gcsAfter = await startGcsFake(t, () => keys!.after.publicKeyPem, 'drain-writer@project.iam.gserviceaccount.com');
  keys = { before: serviceAccount(`${gcsBefore.receiver.url}/token`), after: serviceAccount(`${gcsAfter.receiver.url}/token`) };

  const old = { auth: 'Bearer old-http-Secret-1', header: 'old-header-Secret-2', es: 'old-es-Secret-3', dd: 'old-dd-Secret-4' };
  const next = { auth: 'Bearer new-http-Secret-5', header: 'new-header-Secret-6', es: 'new-es-Secret-7', dd: 'new-dd-Secret-8' };
  const configs = (r: typeof before, s: typeof old, gcsUrl: string, key: string) => ({
    http: { url: `${r.http.url}/in`, auth_header: s.auth, headers: { 'X-Api-Key': s.header }, allow_private_network: true },
    elasticsearch: { url: r.es.url, index: 'cdn-logs', username: 'shipper', password: s.es, allow_private_network: true },
    datadog: { site: 'datadoghq.com', api_key: s.dd, url: `${r.dd.url}/api/v2/logs`, allow_private_network: true },
    gcs: { bucket: 'cdn-logs', service_account_json: key, endpoint_url: gcsUrl, allow_private_network: true },
  });
  const first = configs(before, old, gcsBefore.receiver.url, keys.before.json);
  const moved = configs(after, next, gcsAfter.receiver.url, keys.after.json);
  // The new destination with each credential as a read shows it.
  const CREDENTIALS = ['auth_header', 'headers', 'password', 'api_key', 'service_account_json'];
  const mask = (config: Record<string, unknown>) => Object.fromEntries(Object.entries(config).map(([k, v]) => [k, !CREDENTIALS.includes(k) ? v
    : typeof v === 'object' ? Object.fromEntries(Object.keys(v as object).map((h) => [h, '***'])) : '***']));
  const drains: Record<string, { id: string }> = {};
  for (const [type, destination_config] of Object.entries(first)) {
    drains[type] = await deployment.must('POST', '/v1/cdn/log-drains', { name: `moving ${type}`, destination_type: type, destination_config, fields: ['request_id', 'path'], endpoint_ids: [endpoint.id] });
  }
  const publish = async (what: string) => {
    await deployment.must('POST', '/v1/cdn/config/publish', { description: what });
    const v = (await deployment.must('GET', '/v1/cdn/config/versions?status=active')).data[0].version_number as number;
    await eventually(async () => (await agentHealth(agent)).config_version >= v, `the agent applied ${what}`);
  };
  const agent = await startEdgeAgent(t, deployment, deployment.grpcPort, 'edge-moves', { LOG_DRAIN_FLUSH_INTERVAL_MS: '200', LOG_DRAIN_RETRY_MAX_MS: '500' });
  await publish('drains');

  // The paths each destination received (Cloud Storage: the objects uploaded).
  const lines = (r: Received) => bodyText(r).trim().split('\n').map((l) => JSON.parse(l) as { path: string });
  const paths = (r: typeof before, gcs: typeof gcsBefore, ddKey: string) => ({
    http: r.http.requests.flatMap((q) => lines(q).map((l) => l.path)),
    elasticsearch: r.es.requests.flatMap((q) => bulkItems(q).map((i) => i.doc.path as string)),
    datadog: r.dd.requests.flatMap((q) => datadogEntries(q, ddKey).map((e) => JSON.parse(e.message).path as string)),
    gcs: [...gcs.objects.values()].flatMap((body) => lines({ method: '', url: '', headers: {}, body }).map((l) => l.path)),
  });
  const has = (got: Record<string, string[]>, wanted: string[]) => Object.values(got).every((list) => wanted.every((p) => list.includes(p)));
  let sent = 0;
  const traffic = async (n: number) => {
    const out: string[] = [];
    for (let i = 0; i < n; i++, sent++) {
      t.equal((await viewerGet(agent.port, endpoint.hostname, `/m/${sent}`)).status, 200);
      out.push(`/m/${sent}`);
    }
    return out;
  };
  const early = await traffic(3);
  await eventually(() => has(paths(before, gcsBefore, old.dd), early), 'the first records reach the first receivers', 30_000);

  // The old receivers go down: what comes now is held (and retried) for them.
  for (const r of [before.http, before.es, before.dd, gcsBefore.receiver]) await r.down();
  const held = await traffic(3);
  const read = (id: string) => deployment.must('GET', `/v1/cdn/log-drains/${id}`);
  await eventually(async () => (await Promise.all(Object.values(drains).map((d) => read(d.id)))).every((d) => d.status === 'error'), 'every drain fails to deliver', 30_000);

  // Moved with "***": refused, nothing changes, the test still goes to the first destination.
  for (const [type, drain] of Object.entries(drains)) {
    const shown = (await read(drain.id)).destination_config;
    const masked = mask(moved[type as keyof typeof moved]);
    const res = await deployment.api('PATCH', `/v1/cdn/log-drains/${drain.id}`, { destination_config: masked });
    t.equal(res.status, 422, `${type}: ${JSON.stringify(res.body)}`);
    t.ok(res.body.errors.length > 0 && res.body.errors.every((e: { message: string }) => /send this credential in clear/.test(e.message)), `${type}: names the credentials`);
    t.same((await read(drain.id)).destination_config, shown, `${type}: unchanged`);
    const test = await deployment.must('POST', `/v1/cdn/log-drains/${drain.id}/test`);
    t.equal(test.success, false, `${type}: the test still goes to the first (down) destination`);
  }
  t.same([after.http, after.es, after.dd, gcsAfter.receiver].map((r) => r.arrived.length), [0, 0, 0, 0], 'nothing reached the new receivers');

  // Moved with every credential in clear: the test, the held records and the next ones reach the new receivers.
  for (const [type, drain] of Object.entries(drains)) {
    await deployment.must('PATCH', `/v1/cdn/log-drains/${drain.id}`, { destination_config: moved[type as keyof typeof moved] });
    const test = await deployment.must('POST', `/v1/cdn/log-drains/${drain.id}/test`);
    t.same(test, { success: true, latency_ms: test.latency_ms, error: '' }, `${type}: the connectivity test reaches the new destination`);
  }
  await publish('moved drains');
  const later = await traffic(2);
  await eventually(() => has(paths(after, gcsAfter, next.dd), [...held, ...later]), 'the held and the next records reach the new receivers', 60_000);
  t.ok(after.http.requests.every((r) => r.headers.authorization === next.auth && r.headers['x-api-key'] === next.header), 'http: the new credentials');
  t.ok(after.es.requests.every((r) => r.headers.authorization === `Basic ${Buffer.from(`shipper:${next.es}`).toString('base64')}`), 'elasticsearch: the new credentials');
  t.ok(after.dd.requests.every((r) => r.headers['dd-api-key'] === next.dd), 'datadog: the new key');

  // No old secret, in clear or base64, and no token the first Cloud Storage issued, in anything the new receivers got.
  const oldTokens = gcsBefore.receiver.arrived.map((r) => /^Bearer (.+)$/.exec(r.headers.authorization ?? '')?.[1]).filter((x): x is string => !!x);
  t.ok(oldTokens.length > 0, 'the first Cloud Storage was sent its tokens');
  const forbidden = [...Object.values(old), `shipper:${old.es}`, JSON.parse(keys.before.json).private_key as string, ...oldTokens]
    .flatMap((s) => [s, Buffer.from(s).toString('base64')]);
  const seen = [after.http, after.es, after.dd, gcsAfter.receiver].flatMap((r) => r.arrived).map((r) => `${JSON.stringify(r.headers)}\n${r.url}\n${bodyText(r)}`);
  t.ok(seen.length > 0);
  for (const secret of forbidden) t.notOk(seen.some((text) => text.includes(secret)), `never at the new receivers: ${secret.slice(0, 14)}…`);
});
