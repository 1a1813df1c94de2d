// Cut off from the control plane (issue 21 item 5; the control client calls
// controlPlaneLost after 3 heartbeat intervals without a stream): with
// CACHE_WHEN_DISCONNECTED=revalidate (the default) a fresh cached object is
// revalidated with the origin before it is served, and never served stale on
// an origin error (a purge made meanwhile could be for it); with `serve` the
// cache answers as it is. Back, the cache answers alone again.
import t, { type Test } from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

async function setUp(t: Test, mode?: 'revalidate' | 'serve') {
  let version = 1;
  let failing = false;
  const origin = await startOrigin((req, res) => {
    if (failing) {
      res.writeHead(503);
      return res.end('down');
    }
    const etag = `"v${version}"`;
    const headers = { etag, 'cache-control': 'public, max-age=300, stale-if-error=600' };
    if (req.headers['if-none-match'] === etag) {
      res.writeHead(304, headers);
      return res.end();
    }
    res.writeHead(200, { ...headers, 'content-type': 'text/plain' });
    res.end(`v${version}`);
  });
  const edge = await startAgent(snapshotFor(origin.port), mode ? { cacheWhenDisconnected: mode } : {});
  t.teardown(async () => { await edge.close(); await origin.close(); });
  await edge.get('/o');
  t.equal((await edge.get('/o')).headers['x-cache-status'], 'HIT', 'cached while connected');
  return { origin, edge, change: () => { version++; }, fail: (on: boolean) => { failing = on; } };
}

t.test('revalidate: each cached object is revalidated with the origin before it is served, never served stale; back, the cache answers again', async (t) => {
  const { origin, edge, change, fail } = await setUp(t);
  edge.agent.controlPlaneLost(true);
  const before = origin.count('/o');
  const unchanged = await edge.get('/o');
  t.equal(unchanged.body, 'v1');
  t.equal(unchanged.headers['x-cache-status'], 'REVALIDATED', 'the origin confirmed the copy (304)');
  t.equal(origin.count('/o'), before + 1);
  t.equal(origin.requests.at(-1)!.headers['if-none-match'], '"v1"', 'a conditional request');

  change();
  const changed = await edge.get('/o');
  t.equal(changed.body, 'v2', 'a changed object (one a missed purge was for) is fetched again, not served');

  fail(true);
  const down = await edge.get('/o');
  t.equal(down.status, 503, 'the origin failing: its error, not the cached copy (stale-if-error is off while cut off)');

  fail(false);
  edge.agent.controlPlaneLost(false);
  const back = origin.count('/o');
  t.equal((await edge.get('/o')).headers['x-cache-status'], 'HIT', 'back: served from the cache');
  t.equal(origin.count('/o'), back, 'without asking the origin');
});

t.test('serve: cut off, the cache answers as it is (availability first)', async (t) => {
  const { origin, edge, change } = await setUp(t, 'serve');
  edge.agent.controlPlaneLost(true);
  change();
  const before = origin.count('/o');
  const served = await edge.get('/o');
  t.equal(served.headers['x-cache-status'], 'HIT');
  t.equal(served.body, 'v1');
  t.equal(origin.count('/o'), before, 'the origin is not asked');
});
