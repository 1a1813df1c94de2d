import t from 'tap';
// Staleness without sleeping: each agent runs on a test clock moved past the freshness lifetime.
import { startAgent, startOrigin, snapshotFor, testClock } from './helpers.ts';

t.test('stale-if-error serves the stale copy when the origin is down', async (t) => {
  const origin = await startOrigin((_req, res) => {
    res.writeHead(200, { 'cache-control': 'max-age=1, stale-if-error=60' });
    res.end('survivor');
  });
  const clock = testClock();
  const edge = await startAgent(snapshotFor(origin.port), { clock: clock.now });
  t.teardown(async () => { await edge.close(); });
  await edge.get('/s');
  await origin.close();
  clock.advance(1100);
  const r = await edge.get('/s');
  t.equal(r.status, 200);
  t.equal(r.body, 'survivor');
  t.equal(r.headers['x-cache-status'], 'STALE');
  const other = await edge.get('/never-cached');
  t.equal(other.status, 502, 'connect refused with nothing stale → 502');
});

t.test('stale-if-error from the cache rule covers origin 5xx', async (t) => {
  let fail = false;
  const origin = await startOrigin((_req, res) => {
    if (fail) {
      res.writeHead(503);
      res.end('down');
      return;
    }
    res.writeHead(200, { 'cache-control': 'max-age=1' });
    res.end('ok');
  });
  const clock = testClock();
  const edge = await startAgent(snapshotFor(origin.port, { cache_rules: [{ id: 'r', ttl_seconds: 10, stale_if_error_seconds: 60 }] }), { clock: clock.now });
  t.teardown(async () => { await edge.close(); await origin.close(); });
  await edge.get('/x');
  fail = true;
  clock.advance(1100);
  const r = await edge.get('/x');
  t.equal(r.body, 'ok');
  t.equal(r.headers['x-cache-status'], 'STALE');
});

t.test('stale-while-revalidate answers at once and refreshes in the background', async (t) => {
  let n = 0;
  const clock = testClock();
  const origin = await startOrigin((_req, res) => {
    n++;
    // max-age=2: the origin's whole-second Date can make a fresh copy up to 1 s old already,
    // so with max-age=1 the refreshed copy could be stale again by the next request.
    res.writeHead(200, { 'cache-control': 'max-age=2, stale-while-revalidate=60', date: clock.httpDate() });
    res.end(`v${n}`);
  });
  const edge = await startAgent(snapshotFor(origin.port), { clock: clock.now });
  t.teardown(async () => { await edge.close(); await origin.close(); });
  await edge.get('/w');
  clock.advance(2100);
  const r = await edge.get('/w');
  t.equal(r.body, 'v1');
  t.equal(r.headers['x-cache-status'], 'UPDATING');
  await edge.agent.proxy.settled(); // the background refresh has stored v2
  const after = await edge.get('/w');
  t.equal(after.body, 'v2', 'background refresh stored the new version');
  t.equal(after.headers['x-cache-status'], 'HIT');
});
