// One memory bound for all the log drains of an agent, through a real control
// plane and a real agent with two workers: five drains of one endpoint whose
// destinations are down or never answer, and one that delivers, under viewer
// traffic whose records far exceed the budget. What the drains hold together
// stays within LOG_DRAIN_BUFFER_BYTES per worker at every scrape (it was that
// much per drain), and what does not fit is dropped and counted, in the
// agent's metrics and on the drains.
import t from 'tap';
import { agentHealth, publishedEndpoint, startCountingOrigin, startDeployment, startEdgeAgent, viewerGet } from '../support/edge-deployment.ts';
import { eventually } from '../support/eventually.ts';
import { startReceiver } from '../support/log-receivers.ts';
import { detectServices } from '../support/services.ts';

const BUDGET = 64 * 1024;
const WORKERS = 2;

const { postgresUrl } = await detectServices();
if (!postgresUrl) t.pass('skipped: needs PostgreSQL');
else await t.test('slow and down drains hold no more than the one buffer budget per worker, and count what they drop', { timeout: 180_000 }, async (t) => {
  const deployment = await startDeployment(t, { postgresUrl, env: { EDGE_HEARTBEAT_INTERVAL_MS: '300' } });
  const origin = await startCountingOrigin(t);
  const endpoint = await publishedEndpoint(deployment, origin.port, 'budgeted');
  const down = await startReceiver(t);
  await down.down();
  const slow = await startReceiver(t);
  slow.handle = () => true; // takes every batch and never answers
  const healthy = await startReceiver(t);
  const drain = (name: string, url: string) => deployment.must('POST', '/v1/cdn/log-drains', {
    name, destination_type: 'http', endpoint_ids: [endpoint.id], destination_config: { url, allow_private_network: true },
  });
  const stuck = [
    ...await Promise.all([1, 2, 3].map((i) => drain(`down ${i}`, `${down.url}/in`))),
    ...await Promise.all([1, 2].map((i) => drain(`slow ${i}`, `${slow.url}/in`))),
  ];
  await drain('healthy', `${healthy.url}/in`);
  await deployment.must('POST', '/v1/cdn/config/publish', { description: 'drains' });
  const agent = await startEdgeAgent(t, deployment, deployment.grpcPort, 'edge-budget', {
    WORKERS: String(WORKERS), LOG_DRAIN_BUFFER_BYTES: String(BUDGET), LOG_DRAIN_FLUSH_INTERVAL_MS: '200', LOG_DRAIN_RETRY_MAX_MS: '500',
  });
  const active = (await deployment.must('GET', '/v1/cdn/config/versions?status=active')).data[0].version_number as number;
  await eventually(async () => (await agentHealth(agent)).config_version >= active, 'the agent applied the drains');

  const metricsPort = Number(/"metrics_port":(\d+)/.exec(agent.logs.find((l) => l.includes('"metrics_port"'))!)![1]);
  const scrape = async () => {
    const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    const one = (name: string) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(text)?.[1]);
    const sum = (name: string) => [...text.matchAll(new RegExp(`^${name}\\{drain="([^"]+)"\\} (\\d+)$`, 'gm'))].reduce((n, m) => n + Number(m[2]), 0);
    return { held: one('edge_log_drain_buffer_bytes'), limit: one('edge_log_drain_buffer_limit_bytes'), queued: sum('edge_log_drain_queue_bytes'), dropped: sum('edge_log_drain_records_dropped_total') };
  };
  const within = async (when: string) => {
    const m = await scrape();
    t.equal(m.limit, BUDGET * WORKERS, `${when}: the limit is the budget of each worker`);
    t.ok(m.held <= m.limit, `${when}: the drains hold ${m.held} of ${m.limit} bytes`);
    t.ok(m.queued <= m.limit, `${when}: their records (${m.queued} bytes) fit in it`);
    return m;
  };

  // Each record is some 700 bytes in every drain (all fields): 400 answers are about 280 KB a drain, 1.4 MB for the five.
  for (let i = 0; i < 400; i++) {
    t.equal((await viewerGet(agent.port, endpoint.hostname, `/b/${i}`)).status, 200);
    if (i % 100 === 99) await within(`after ${i + 1} answers`);
  }
  const after = await within('after the traffic');
  t.ok(after.dropped > 0, `what did not fit was dropped and counted (${after.dropped})`);
  t.ok(healthy.requests.length > 0, 'the drain that delivers kept delivering');
  // The drains show what the nodes count.
  await eventually(async () => {
    const drains = await Promise.all(stuck.map((d) => deployment.must('GET', `/v1/cdn/log-drains/${d.id}`)));
    return drains.every((d) => d.records_dropped > 0 && d.status === 'error');
  }, 'every stuck drain shows records dropped', 30_000);
  const shown = await deployment.must('GET', `/v1/cdn/log-drains/${stuck[0].id}`);
  t.match(shown.last_error, /^Edge node edge-budget: /);
});
