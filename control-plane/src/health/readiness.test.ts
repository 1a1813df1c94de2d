import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';

t.test('GET /v1/cdn/health/ready: 200 with components while PostgreSQL and Redis answer, 503 once PostgreSQL is unreachable', async (t) => {
  const cp = await startTestControlPlane(t, { throughProxy: true });
  const ready = await cp.request('GET', '/v1/cdn/health/ready');
  t.equal(ready.status, 200);
  t.equal(ready.body.status, 'ok');
  t.type(ready.body.version, 'string');
  t.ok(!Number.isNaN(Date.parse(ready.body.timestamp)));
  t.equal(ready.body.components.postgresql.status, 'ok');
  t.type(ready.body.components.postgresql.latency_ms, 'number');
  t.equal(ready.body.components.postgresql.backend, cp.database.db.embedded ? 'embedded' : 'postgresql', 'names what it runs on');
  t.equal(ready.body.components.redis.status, 'ok');
  t.equal(ready.body.components.redis.backend, cp.config.REDIS_URL ? 'redis' : 'in-process');
  t.type(ready.body.components.redis.latency_ms, 'number');
  t.ok('edge_config' in ready.body.components);

  await cp.database.proxy!.cut();
  const down = await cp.request('GET', '/v1/cdn/health/ready');
  t.equal(down.status, 503);
  t.equal(down.body.status, 'unavailable');
  t.equal(down.body.components.postgresql.status, 'error');
  t.equal(down.body.components.postgresql.latency_ms, null);
  t.equal(down.body.components.redis.status, 'ok');
});

t.test('readiness needs no authentication', async (t) => {
  const cp = await startTestControlPlane(t);
  const res = await cp.request('GET', '/v1/cdn/health/ready', { headers: { authorization: 'Bearer garbage' } });
  t.equal(res.status, 200);
});

t.test('readiness answers with its report (503, redis: error) when Redis is unreachable, and the API still starts', async (t) => {
  const cp = await startTestControlPlane(t, { env: { REDIS_URL: 'redis://127.0.0.1:1' } });
  const res = await cp.request('GET', '/v1/cdn/health/ready');
  t.equal(res.status, 503);
  t.equal(res.body.status, 'unavailable');
  t.equal(res.body.components.redis.status, 'error');
  t.equal(res.body.components.postgresql.status, 'ok');
});
