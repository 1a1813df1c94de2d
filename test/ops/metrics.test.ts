// The metrics ops/ reads, against running processes (issue 26 item 2): a
// control-plane process and an edge agent with two workers (the production
// default is one per core), an origin with a health check, a log drain, a
// default certificate, viewer traffic and a purge, so the labelled series
// exist. Both /metrics pass `promtool check metrics`, and every metric name an
// alert in ops/alerts.yml or a panel of ops/grafana/dashboards queries is in a
// scrape. Skips without promtool; fails under CI=true, where .ci/run installs it.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { connect } from 'node:tls';
import { join } from 'node:path';
import t from 'tap';
import { makeCa, makeLeaf } from '../support/certificates.ts';
import { agentHealth, startCountingOrigin, startDeployment, startEdgeAgent, viewerGet } from '../support/edge-deployment.ts';
import { eventually } from '../support/eventually.ts';
import { startReceiver } from '../support/log-receivers.ts';
import { PROMTOOL_INSTALL_HINT, promtool, promtoolInstalled } from '../support/promtool.ts';
import { detectServices } from '../support/services.ts';
import { alertQueries, dashboardQueries, metricNames } from './queries.ts';

/** Metrics Prometheus makes itself for every target. */
const SYNTHETIC = new Set(['up', 'scrape_duration_seconds', 'scrape_samples_scraped']);

/** The sample names of an exposition (`name{labels} value` and `name value` lines). */
function sampleNames(text: string): Set<string> {
  const names = new Set<string>();
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]/.exec(line);
    if (m) names.add(m[1]!);
  }
  return names;
}

const { postgresUrl } = await detectServices();
if (!promtoolInstalled()) {
  if (process.env.CI === 'true') t.fail(PROMTOOL_INSTALL_HINT);
  else t.test('the metrics ops/ reads', { skip: PROMTOOL_INSTALL_HINT }, async () => {});
} else if (!postgresUrl) t.pass('skipped: needs PostgreSQL');
else await t.test('the metrics ops/ reads are exposed by running processes', { timeout: 120_000 }, async (t) => {
  const queries = [...alertQueries(), ...dashboardQueries()];
  const wanted = new Map<string, string[]>();
  for (const q of queries) for (const name of metricNames(q.expr)) wanted.set(name, [...(wanted.get(name) ?? []), q.where]);
  t.ok(wanted.size >= 30, `the alerts and dashboards read ${wanted.size} metrics`);

  // Traffic reports every 300 ms, so the channel's report counters have series within the test.
  const deployment = await startDeployment(t, { postgresUrl, env: { EDGE_TRAFFIC_REPORT_INTERVAL_MS: '300' } });
  const origin = await startCountingOrigin(t);
  const originRecord = await deployment.must('POST', '/v1/cdn/origins', {
    name: 'metrics origin', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true,
    health_check_url: `http://127.0.0.1:${origin.port}/healthz`, health_check_interval_seconds: 5,
  });
  const endpoint = await deployment.must('POST', '/v1/cdn/endpoints', { name: 'metrics', default_origin_id: originRecord.id });
  const receiver = await startReceiver(t);
  await deployment.must('POST', '/v1/cdn/log-drains', {
    name: 'metrics drain', destination_type: 'http', endpoint_ids: [endpoint.id], destination_config: { url: `${receiver.url}/in`, allow_private_network: true },
  });
  await deployment.must('POST', '/v1/cdn/config/publish', { description: 'metrics' });

  const dir = mkdtempSync(join(tmpdir(), 'sp-ops-metrics-'));
  const ca = await makeCa('Ops metrics CA');
  const wildcard = await makeLeaf(ca, ['*.cdn.localhost']);
  writeFileSync(join(dir, 'cdn.pem'), wildcard.certPem + ca.pem);
  writeFileSync(join(dir, 'cdn.key'), wildcard.keyPem, { mode: 0o600 });
  const agent = await startEdgeAgent(t, deployment, deployment.grpcPort, 'edge-metrics', {
    WORKERS: '2', TLS_CERT_FILE: join(dir, 'cdn.pem'), TLS_KEY_FILE: join(dir, 'cdn.key'), LOG_DRAIN_FLUSH_INTERVAL_MS: '200',
  });
  const active = (await deployment.must('GET', '/v1/cdn/config/versions?status=active')).data[0].version_number as number;
  await eventually(async () => (await agentHealth(agent)).config_version >= active, 'the agent applied the configuration');

  // Misses, hits and a purge acknowledged by the agent.
  for (const path of ['/a', '/a', '/b', '/b', '/a']) t.equal((await viewerGet(agent.port, endpoint.hostname, path)).status, 200, `GET ${path}`);
  const purge = await deployment.must('POST', '/v1/cdn/cache/purge', { purge_type: 'path', paths: ['/a'] });
  await eventually(async () => (await deployment.must('GET', `/v1/cdn/purge/${purge.id}`)).status === 'completed', 'the purge completed');

  // A handshake for a name the agent has no certificate for fails (counted by reason).
  const httpsPort = Number(/"https_port":(\d+)/.exec(agent.logs.find((l) => l.includes('"https_port"'))!)![1]);
  const handshake = await new Promise<string>((resolve) => {
    const socket = connect({ host: '127.0.0.1', port: httpsPort, servername: 'unknown.example.org', rejectUnauthorized: false, timeout: 10_000 });
    socket.once('secureConnect', () => { socket.destroy(); resolve('connected'); });
    socket.once('timeout', () => { socket.destroy(); resolve('timed out'); });
    socket.once('error', () => resolve('refused'));
  });
  t.equal(handshake, 'refused', 'a handshake for an unknown name fails');

  const metricsPort = Number(/"metrics_port":(\d+)/.exec(agent.logs.find((l) => l.includes('"metrics_port"'))!)![1]);
  const scrape = async (url: string) => {
    const res = await fetch(url, { signal: AbortSignal.timeout(10_000) });
    if (res.status !== 200) throw new Error(`${url}: ${res.status}`);
    return res.text();
  };
  let texts: { controlPlane: string; agent: string } = { controlPlane: '', agent: '' };
  let exposed = new Set<string>();
  const missing = () => [...wanted.keys()].filter((name) => !SYNTHETIC.has(name) && !exposed.has(name));
  // Series that come with the first origin probe and the drain's first batch: scraped until they are there (or the wait ends).
  await eventually(async () => {
    texts = { controlPlane: await scrape(`${deployment.process.url}/metrics`), agent: await scrape(`http://127.0.0.1:${metricsPort}/metrics`) };
    exposed = new Set([...sampleNames(texts.controlPlane), ...sampleNames(texts.agent)]);
    return missing().length === 0;
  }, 'every metric the alerts and dashboards read is exposed', 30_000).catch(() => {});
  t.same(missing().map((name) => `${name} (${wanted.get(name)!.join(', ')})`), [], 'every metric an alert or a dashboard reads is in a scrape');
  // The version agents should be on, beside the version the agent reports (a publish no agent takes shows as a gap).
  const activeVersion = Number(/^edge_config_active_version (\d+)$/m.exec(texts.controlPlane)?.[1] ?? -1);
  const applied = Number(/^edge_config_version (\d+)$/m.exec(texts.agent)?.[1] ?? -2);
  t.ok(activeVersion >= 1, `the control plane exposes the active configuration version (${activeVersion})`);
  t.equal(applied, activeVersion, "the agent is on the active version");

  for (const [name, text] of Object.entries(texts)) {
    const check = promtool(['check', 'metrics'], { input: text });
    t.equal(check.status, 0, `promtool check metrics accepts the ${name}'s /metrics${check.status === 0 ? '' : `:\n${check.output}`}`);
  }
  // The check above can fail: a name no process exposes is reported.
  exposed.delete('edge_requests_total');
  t.same(missing(), ['edge_requests_total'], 'a metric missing from the scrapes is reported');
});
