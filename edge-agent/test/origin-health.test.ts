// Origin health probes: consecutive failures are counted, an origin goes
// healthy → degraded → unhealthy → healthy, and healthReport shows it.
import t from 'tap';
import { startAgent, startOrigin, snapshotFor, sleep } from './helpers.ts';
import type { EdgeAgent } from '../src/agent.ts';

async function until(agent: EdgeAgent, what: string, pred: (o: ReturnType<EdgeAgent['healthReport']>['origins'][number]) => boolean) {
  for (let i = 0; i < 150; i++) {
    const o = agent.healthReport().origins.find((x) => x.originId === 'o1');
    if (o && pred(o)) return o;
    await sleep(50);
  }
  throw new Error(`timed out waiting for: ${what} (last: ${JSON.stringify(agent.healthReport().origins)})`);
}

t.test('probes count consecutive failures; healthy → unhealthy → healthy is reported', async (t) => {
  let failing = false;
  const origin = await startOrigin((req, res) => {
    if (req.url === '/healthz' && failing) {
      res.writeHead(503);
      res.end('down');
      return;
    }
    res.end('ok');
  });
  const edge = await startAgent(snapshotFor(origin.port, { origin: { health_check_url: '/healthz', health_check_interval_seconds: 1 } }), { healthProbes: true });
  t.teardown(async () => { await edge.close(); await origin.close(); });

  const healthy = await until(edge.agent, 'first probe', (o) => o.status !== 'unknown');
  t.equal(healthy.status, 'healthy');
  t.equal(healthy.consecutiveFailures, 0);
  t.equal(edge.agent.healthReport().status, 'ok');

  failing = true;
  const degraded = await until(edge.agent, 'one failure', (o) => o.consecutiveFailures >= 1);
  t.equal(degraded.status, 'degraded', 'one failure: degraded');
  t.equal(degraded.failureReason, 'status 503');
  t.ok(degraded.lastFailureAtMs > 0);
  const unhealthy = await until(edge.agent, 'three failures', (o) => o.consecutiveFailures >= 3);
  t.equal(unhealthy.status, 'unhealthy', 'three consecutive failures: unhealthy');
  t.equal(edge.agent.healthReport().status, 'degraded', 'the agent reports itself degraded');
  t.ok(unhealthy.lastSuccessAtMs > 0 && unhealthy.lastSuccessAtMs < unhealthy.lastFailureAtMs);

  failing = false;
  const back = await until(edge.agent, 'recovery', (o) => o.status === 'healthy');
  t.equal(back.consecutiveFailures, 0, 'one success resets the count');
  t.equal(back.failureReason, '');
  t.equal(edge.agent.healthReport().status, 'ok');
  t.ok(origin.count('/healthz') >= 5, 'probes went to the health_check_url');
});
