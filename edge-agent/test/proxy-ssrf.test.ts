import t from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

t.test('without allow_private_network the SSRF guard refuses 127.0.0.1 at connect time', async (t) => {
  const origin = await startOrigin((_req, res) => res.end('should not be reached'));
  const edge = await startAgent(snapshotFor(origin.port, { origin: { allow_private_network: false } }));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const r = await edge.get('/x');
  t.equal(r.status, 502);
  t.match(r.body, /not allowed/);
  t.equal(origin.count(), 0, 'origin never contacted');
  const viaName = await startAgent(snapshotFor(origin.port, { origin: { allow_private_network: false, host: 'localhost' } }));
  t.teardown(() => viaName.close());
  const r2 = await viaName.get('/y');
  t.equal(r2.status, 502, 'a name resolving to loopback is refused too');
  t.equal(origin.count(), 0);
});

t.test('typed origin errors: refused → 502, timeout → 504, retries only idempotent', async (t) => {
  let hits = 0;
  const slow = await startOrigin((req, res) => {
    hits++;
    if (req.url === '/slow') return; // never answers
    res.writeHead(503);
    res.end('busy');
  });
  const edge = await startAgent(snapshotFor(slow.port, { origin: { timeout_ms: 300, max_retries: 2, retry_on: ['5xx', 'connect_failure'] } }));
  t.teardown(async () => { await edge.close(); await slow.close(); });
  const timeout = await edge.get('/slow');
  t.equal(timeout.status, 504);
  hits = 0;
  const retried = await edge.get('/busy');
  t.equal(retried.status, 503);
  t.equal(hits, 3, 'GET retried max_retries times on 5xx');
  hits = 0;
  const post = await edge.get('/busy', {}, 'POST', 'payload');
  t.equal(post.status, 503);
  t.equal(hits, 1, 'POST with a body is never retried');
});
