// Prefetch through the seam: URLs are requested through the agent's own
// listener, so they land in the cache exactly as viewer requests would.
import t from 'tap';
import { startAgent, startOrigin, snapshotFor, HOST } from './helpers.ts';

t.test('prefetch warms the cache and reports failures per URL', async (t) => {
  const origin = await startOrigin((req, res) => {
    if (req.url!.startsWith('/missing')) {
      res.writeHead(404);
      res.end();
      return;
    }
    res.writeHead(200, { 'cache-control': 'max-age=600', 'x-seen-host': String(req.headers.host) });
    res.end(`body ${req.url}`);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });

  const result = await edge.agent.prefetch('ep1', ['/a', `https://${HOST}/b?v=1`, 'https://other.example/c', '/missing', 'http://[bad']);
  t.equal(result.fetched, 3, '/a, /b?v=1 and /c (an absolute URL\'s host is ignored)');
  t.equal(result.failed, 2);
  t.same(result.failed_urls.map((f) => f.url).sort(), ['/missing', 'http://[bad'].sort());
  t.match(result.failed_urls.find((f) => f.url === '/missing')!.reason, /404/);
  t.equal(result.failed_urls.find((f) => f.url === 'http://[bad')!.reason, 'invalid URL');

  for (const [path, body] of [['/a', 'body /a'], ['/b?v=1', 'body /b?v=1'], ['/c', 'body /c']]) {
    const r = await edge.get(path);
    t.equal(r.headers['x-cache-status'], 'HIT', `${path} is a hit after prefetch`);
    t.equal(r.body, body);
  }
  t.equal(origin.count('/a'), 1, 'one origin fetch per URL');
  t.equal(origin.requests.find((r) => r.url === '/a')!.headers['x-forwarded-host'], HOST, 'prefetch went through the viewer path with the endpoint host');

  const rollup = edge.agent.takeTrafficRollups().find((r) => r.endpointId === 'ep1')!;
  t.equal(rollup.requests, 7, 'the four prefetches that reached the listener are counted like viewer requests (plus three gets)');

  const unknown = await edge.agent.prefetch('nope', ['/a', '/b']);
  t.same(unknown, { fetched: 0, failed: 2, failed_urls: [{ url: '/a', reason: 'unknown endpoint' }, { url: '/b', reason: 'unknown endpoint' }] });
});
