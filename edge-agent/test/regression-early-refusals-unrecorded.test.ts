// Regression: early refusals skipped the access record and metrics. A 421 for
// an unknown Host, a 403 for a disabled endpoint and a 400 for a bad request
// target were written straight to the socket, so they never showed in
// edge_requests_total or the per-endpoint traffic. Every answer now leaves
// through the proxy's one exit, which counts it, and carries Cache-Status.
import t from 'tap';
import { HOST, rawRequest, snapshotFor, startAgent, startOrigin } from './helpers.ts';

t.test('refusals are counted like every other answer', async (t) => {
  const origin = await startOrigin((_req, res) => res.end('ok'));
  const snapshot = snapshotFor(origin.port);
  const off = snapshotFor(origin.port, { endpoint: { id: 'ep-off', hostname: 'off.test', enabled: false, default_origin_id: 'o-off' }, origin: { id: 'o-off' } }).endpoints[0];
  snapshot.endpoints.push(off);
  const edge = await startAgent(snapshot);
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const raw = (lines: string[]) => rawRequest(edge.port, [...lines, 'Connection: close']);

  const unknown = await edge.get('/', { host: 'nobody.test' });
  t.equal(unknown.status, 421);
  t.match(unknown.headers['cache-status'], /^edge-local; fwd=bypass/, 'a refusal carries Cache-Status too');
  t.equal((await raw(['GET /x HTTP/1.1', `Host: ${HOST}:bad`])).status, 400);
  t.equal((await raw(['GET /a/%2f/b HTTP/1.1', `Host: ${HOST}`])).status, 400);
  const disabled = await edge.get('/', { host: 'off.test' });
  t.equal(disabled.status, 403);
  t.equal((await edge.get('/fine')).status, 200);

  const totals = edge.agent.traffic.totals;
  t.equal(totals.get('')?.statusClasses[4], 2, '421 and the malformed Host: no endpoint, counted under ""');
  t.equal(totals.get('ep1')?.statusClasses[4], 1, 'the bad path of ep1');
  t.equal(totals.get('ep1')?.statusClasses[2], 1);
  t.equal(totals.get('ep-off')?.statusClasses[4], 1, 'the disabled endpoint\'s 403');
  const scrape = await edge.agent.metrics.registry.metrics();
  t.match(scrape, /edge_requests_total\{endpoint="",status_class="4xx"\} 2/);
  t.match(scrape, /edge_requests_total\{endpoint="ep-off",status_class="4xx"\} 1/);
  const rollups = edge.agent.takeTrafficRollups();
  t.same(rollups.map((r) => r.endpointId).sort(), ['ep-off', 'ep1'], 'rollups for the control plane only carry endpoints');
});
