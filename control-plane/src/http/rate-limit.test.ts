import t from 'tap';
import { MemoryStore } from '../store/memory-store.ts';
import { ApiError } from './errors.ts';
import { RateLimitLeases } from './rate-limit.ts';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { widgetRoutes } from '../../../test/support/widgets-fixture.ts';

t.test('a route limit answers 429 RATE_LIMITED with Retry-After once spent', async (t) => {
  const cp = await startTestControlPlane(t, { extraRoutes: widgetRoutes });
  for (let i = 0; i < 3; i++) {
    const ok = await cp.request('POST', '/v1/test/limited');
    t.equal(ok.status, 200, `request ${i + 1} allowed`);
    t.equal(ok.headers.get('ratelimit-remaining'), String(2 - i));
  }
  const limited = await cp.request('POST', '/v1/test/limited');
  t.equal(limited.status, 429);
  t.equal(limited.body.code, 'RATE_LIMITED');
  t.equal(limited.body.request_id, limited.headers.get('x-request-id'));
  const retryAfter = Number(limited.headers.get('retry-after'));
  t.ok(retryAfter >= 1 && retryAfter <= 60, `Retry-After ${retryAfter}`);
});

t.test('the global per-client budget applies to every API route', async (t) => {
  const cp = await startTestControlPlane(t, { env: { RATE_LIMIT_PER_MINUTE: '5' } });
  const statuses: number[] = [];
  for (let i = 0; i < 7; i++) statuses.push((await cp.request('GET', '/v1/users/me')).status);
  t.same(statuses, [401, 401, 401, 401, 401, 429, 429], 'every /v1 request counts, answered or not');
  t.equal((await cp.request('GET', '/healthz')).status, 200, 'system endpoints are not counted');
  t.equal((await cp.request('GET', '/v1/cdn/health/ready')).status, 200, 'readiness is not counted: probes must always get an answer');
});

t.test('a leased budget holds across replicas: blocks taken from the shared store, spent locally, never past the limit', async (t) => {
  const store = new MemoryStore();
  t.teardown(() => store.close());
  const replicas = [new RateLimitLeases(store), new RateLimitLeases(store)];
  const outcomes: (number | string)[] = [];
  for (let i = 0; i < 30; i++) {
    try {
      outcomes.push((await replicas[i % 2]!.enforce('cdn-purge:caller', 20, 60)).remaining);
    } catch (error) {
      t.ok(error instanceof ApiError && error.code === 'RATE_LIMITED' && Number(error.headers?.['retry-after']) >= 1);
      outcomes.push('429');
    }
  }
  t.equal(outcomes.filter((o) => o !== '429').length, 20, 'exactly the limit allowed in all');
  t.same(outcomes.slice(20), Array(10).fill('429'));
  t.equal((await store.get('rl:cdn-purge:caller')), '20', 'the shared counter holds what the replicas took');
  // Concurrent requests of one caller on one replica share the round trip that takes a block.
  const one = new RateLimitLeases(store);
  const results = await Promise.allSettled(Array.from({ length: 5 }, () => one.enforce('cdn-purge:other', 3, 60)));
  t.same(results.map((r) => r.status), ['fulfilled', 'fulfilled', 'fulfilled', 'rejected', 'rejected']);
});
